"""Runs the app under uvicorn, and the gRPC frontend in the same event loop, with a graceful
drain on SIGTERM / Ctrl-C."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
import time
from types import FrameType
from typing import Protocol

import uvicorn
from fastapi import FastAPI

from app.http.transport import HttpTransport
from app.multiprocess.stop_watchdog import StopWatchdog

logger = logging.getLogger(__name__)

GRPC_GRACE_SECONDS = 5.0
"""After the drain: how long gRPC calls still open may end on their own before they are
cancelled."""
SAME_STOP_SECONDS = 2.0
"""A frontend process of several: a SIGTERM this soon after the first is the same stop."""


class SideServer(Protocol):
    """A server run beside uvicorn in its event loop (the gRPC frontend)."""

    async def start(self) -> None: ...

    async def stop(self, grace: float) -> None: ...


class DrainingServer(uvicorn.Server):
    """A uvicorn server that drains before it stops.

    First SIGTERM or SIGINT: readiness and new requests answer 503 (gRPC opens no new
    streams) while running requests finish (up to the drain timeout; the rest are aborted
    with an error); then the engines shut down and the process exits 0. A second signal
    stops at once. Side servers start once the engines are up and stop before they stop.
    A stop still running the drain timeout plus SHUTDOWN_GRACE_SECONDS after the first
    signal is ended by the `watchdog`: the processes it started killed, exit status 1.

    `supervised` (one frontend process of several): the supervisor forwards its signals as
    SIGTERM, so SIGINT is left to it (Ctrl-C in a terminal reaches every process of the
    group) and a SIGTERM within `SAME_STOP_SECONDS` of the first is the same stop (systemd
    and `kill -TERM -PGID` signal every process, and the supervisor forwards one more).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        app: FastAPI,
        side: SideServer | None = None,
        supervised: bool = False,
        watchdog: StopWatchdog | None = None,
    ) -> None:
        super().__init__(config)
        self._watchdog = watchdog
        self._app = app
        self._side = side
        self._supervised = supervised
        self._first_signal_at: float | None = None
        self._side_started = False
        self.failed_side = False
        self._drain_task: asyncio.Task[None] | None = None
        self._draining = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up (engines, then HTTP), then the side server; `started` only once
        both listen."""
        await super().startup(sockets)
        if not self.should_exit:
            for server in getattr(self, "servers", []):
                for bound in server.sockets:
                    host, port = bound.getsockname()[:2]
                    logger.info("Started HTTPService at %s:%d", host, port)
        if self._side is None or self.should_exit:
            return
        self.started = False
        try:
            await self._side.start()
            self._side_started = True
        except Exception:
            logger.exception("the gRPC server could not start")
            self.failed_side = self.should_exit = True
        self.started = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._side is not None and self._side_started:
            await self._side.stop(0 if self.force_exit else GRPC_GRACE_SECONDS)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._supervised and self._left_to_supervisor(sig):
            return
        if self._draining or self.should_exit:
            logger.warning("second %s: stopping now", signal.Signals(sig).name)
            self.should_exit = True
            self.force_exit = True
            return
        self._draining = True
        if self._watchdog is not None:
            self._watchdog.arm()
        logger.info("%s: draining before shutdown", signal.Signals(sig).name)
        loop = asyncio.get_event_loop()
        loop.call_soon_threadsafe(self._start_drain, loop)

    def _left_to_supervisor(self, sig: int) -> bool:
        """Whether a supervised process ignores `sig`: the supervisor's SIGTERM does the job."""
        if sig == signal.SIGINT:
            return True
        now = time.monotonic()
        if self._first_signal_at is None:
            self._first_signal_at = now
            return False
        return now - self._first_signal_at < SAME_STOP_SECONDS

    def _start_drain(self, loop: asyncio.AbstractEventLoop) -> None:
        self._drain_task = loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            await self._app.state.runtime.registry.drain()
        finally:
            self.should_exit = True


def stop_watchdog(app: FastAPI) -> StopWatchdog | None:
    """The bound on a stop of the app's server: the drain timeout plus the shutdown grace."""
    settings = getattr(app.state, "settings", None)
    if settings is None:
        return None
    return StopWatchdog(settings.drain_timeout_seconds + settings.shutdown_grace_seconds)


def serve(
    app: FastAPI,
    host: str,
    port: int,
    log_level: str,
    side: SideServer | None = None,
    sockets: list[socket.socket] | None = None,
    supervised: bool = False,
) -> None:
    """Serve until stopped (with the app's `HttpTransport`: TLS, connection limits); on
    `sockets` already bound if given. `supervised`: a frontend process of several, whose
    supervisor forwards the signals (see `DrainingServer`). Once stopped, the heap is frozen:
    the interpreter's exit then skips collecting it (seconds, with torch and vLLM loaded)."""
    transport: HttpTransport = getattr(app.state, "http_transport", HttpTransport())
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        **transport.uvicorn_options(),
    )
    server = DrainingServer(config, app, side, supervised, stop_watchdog(app))
    server.run(sockets=sockets)
    gc.freeze()
    if server.failed_side:
        raise SystemExit(3)
