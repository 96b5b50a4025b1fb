"""Runs the app under uvicorn with a graceful drain on SIGTERM / Ctrl-C."""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import uvicorn
from fastapi import FastAPI

logger = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    """A uvicorn server that drains before it stops.

    First SIGTERM or SIGINT: readiness and new requests answer 503 while running requests
    finish (up to the drain timeout; the rest are aborted with an error); then the engines
    shut down and the process exits 0. A second signal stops at once.
    """

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app
        self._drain_task: asyncio.Task[None] | None = None
        self._draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining or self.should_exit:
            logger.warning("second %s: stopping now", signal.Signals(sig).name)
            self.should_exit = True
            self.force_exit = True
            return
        self._draining = True
        logger.info("%s: draining before shutdown", signal.Signals(sig).name)
        loop = asyncio.get_event_loop()
        loop.call_soon_threadsafe(self._start_drain, loop)

    def _start_drain(self, loop: asyncio.AbstractEventLoop) -> None:
        self._drain_task = loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            await self._app.state.runtime.registry.drain()
        finally:
            self.should_exit = True


def serve(app: FastAPI, host: str, port: int, log_level: str) -> None:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    DrainingServer(config, app).run()
