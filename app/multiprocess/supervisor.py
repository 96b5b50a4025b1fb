"""`FRONTEND_PROCESSES` > 1: the supervising process. It holds the HTTP port, runs each model
version's engine core, and spawns the frontend processes that serve HTTP and gRPC (each on
its own SO_REUSEPORT socket) and the OpenAI routes as clients of those cores; SIGTERM drains
every frontend process, then stops the cores. A frontend process that dies after it was
ready is started again (its engines join fresh cores); one that dies before it was ever
ready stops the whole group, as `vllm serve` does.

What a frontend process runs and how an engine core is hosted are given by the caller
(app/launch/frontend_group.py): this package imports neither the app nor vLLM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from app.multiprocess.channel import STREAM_LIMIT, Channel, ChannelClosed, RemoteError
from app.multiprocess.cores import CoreKey, EngineCores, HostFactory
from app.multiprocess.link_calls import LinkCall
from app.multiprocess.metrics import merge_expositions
from app.multiprocess.stop_watchdog import StopWatchdog
from app.observability.log_control import LOG_CONTROL
from app.observability.metrics_server import MetricsHttpServer, on_loop
from app.settings import Settings

logger = logging.getLogger(__name__)

RESPAWN_DELAY_SECONDS = 1.0
"""How long a frontend process that died after it was ready waits before it starts again."""
SUPERVISOR_SOCKET = "supervisor.sock"

FrontendMain = Callable[[int, Settings, str, str], None]
"""What each frontend process runs: (its index, the settings, the supervisor's socket, the
log file). Spawned, so a function of a module, importable in the new process."""


def core_key(key: dict[str, str]) -> CoreKey:
    """A core's key as a frontend process sends it: model, version, load and instance."""
    return key["model"], key["version"], key["load"], key.get("instance", "0")


def bind_shared_port(host: str, port: int) -> socket.socket:
    """A socket bound to the HTTP port with SO_REUSEPORT, so that each frontend process can
    listen on its own: the kernel then spreads new connections evenly over them, where on one
    shared listening socket whichever process wakes first takes a whole burst of them. The
    supervisor's own socket never listens: it holds the port (a port in use fails here, at
    once) and fixes its number when PORT is 0."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


class Supervisor:
    """The group of `count` frontend processes, each running `frontend_main`, and the engine
    cores they share (each hosted by `make_host`)."""

    def __init__(
        self, settings: Settings, count: int, make_host: HostFactory, frontend_main: FrontendMain
    ) -> None:
        self._settings = settings
        self._count = count
        self._frontend_main = frontend_main
        self._run_dir = Path(tempfile.mkdtemp(prefix="tvg-frontends-"))
        self._cores = EngineCores(count, self._run_dir, make_host)
        self._processes: dict[int, BaseProcess] = {}
        self._channels: dict[int, Channel] = {}
        self._ready: set[int] = set()
        self._loads: dict[str, str] = {}
        """Model -> the token of its latest load, shared by every frontend process's engines."""
        self._stopping = asyncio.Event()
        self._draining: set[int] = set()
        self._signals = 0
        self._code = 0
        self._watchdog = StopWatchdog(
            settings.drain_timeout_seconds + settings.shutdown_grace_seconds
        )

    async def run(self) -> int:
        """Serve until stopped; the group's exit status."""
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self._settings.cpu_kvcache_space_gib))
        path = str(self._run_dir / SUPERVISOR_SOCKET)
        server = await asyncio.start_unix_server(self._connected, path=path, limit=STREAM_LIMIT)
        http = bind_shared_port(self._settings.host, self._settings.port)
        settings = self._settings.model_copy(update={"port": http.getsockname()[1]})
        metrics_port = self._serve_metrics()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        logger.info("serving with %d frontend processes", self._count)
        try:
            for index in range(self._count):
                self._spawn(index, settings, path)
            await self._stopping.wait()
            await self._wait_for_frontend_processes()
        finally:
            server.close()
            if metrics_port is not None:
                metrics_port.stop()
            await self._cores.stop_all()
            http.close()
            shutil.rmtree(self._run_dir, ignore_errors=True)
        return self._code

    def _spawn(self, index: int, settings: Settings, path: str) -> None:
        context = multiprocessing.get_context("spawn")
        process = context.Process(
            target=self._frontend_main,
            name=f"frontend-{index}",
            args=(index, settings, path, LOG_CONTROL.file),
            daemon=False,
        )
        process.start()
        self._processes[index] = process
        asyncio.get_running_loop().add_reader(process.sentinel, self._exited, index, settings, path)

    def _exited(self, index: int, settings: Settings, path: str) -> None:
        process = self._processes[index]
        asyncio.get_running_loop().remove_reader(process.sentinel)
        process.join()
        self._channels.pop(index, None)
        if self._stopping.is_set():
            return
        if index not in self._ready:
            logger.error(
                "frontend %d exited (code %s) before it was ready: stopping",
                index,
                process.exitcode,
            )
            self._code = process.exitcode or 1
            self._stop_frontend_processes()
            return
        self._ready.discard(index)
        logger.error("frontend %d exited (code %s): starting it again", index, process.exitcode)
        asyncio.get_running_loop().call_later(
            RESPAWN_DELAY_SECONDS, self._respawn, index, settings, path
        )

    def _respawn(self, index: int, settings: Settings, path: str) -> None:
        if not self._stopping.is_set():
            self._spawn(index, settings, path)

    def _on_signal(self, sig: int) -> None:
        self._signals += 1
        self._watchdog.arm()
        logger.info(
            "%s: stopping the frontend processes%s",
            signal.Signals(sig).name,
            " now" if self._signals > 1 else "",
        )
        self._stop_frontend_processes()

    def _stop_frontend_processes(self) -> None:
        self._stopping.set()
        for index, process in self._processes.items():
            if process.is_alive() and process.pid is not None:
                self._draining.add(index)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    async def _wait_for_frontend_processes(self) -> None:
        """Join every frontend process; the group's status is that of the drains (a process
        already dead when the stop came, e.g. waiting for its restart, does not count, nor one
        that our SIGTERM ended before it could take signals, e.g. a restarted one still
        starting)."""
        for index, process in list(self._processes.items()):
            await asyncio.to_thread(process.join)
            stopped_by_our_signal = process.exitcode == -signal.SIGTERM  # one still starting up
            if (
                index in self._draining
                and process.exitcode
                and not stopped_by_our_signal
                and not self._code
            ):
                self._code = process.exitcode

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        channel = Channel(reader, writer, lambda op, args: self._answer(channel, op, args))
        await channel.serve()

    async def _answer(self, channel: Channel, name: str, args: dict[str, Any]) -> Any:
        op, index = LinkCall(name), args.pop("frontend_process")
        if op is LinkCall.HELLO:  # a (re)started frontend process joins the current loads' cores
            self._channels[index] = channel
            return self._loads
        if op is LinkCall.READY:
            self._ready.add(index)
            return None
        if op is LinkCall.ACQUIRE:
            key = core_key(args["key"])
            return await self._cores.acquire(key, args["engine_args"], index, args.get("instance"))
        if op is LinkCall.RELEASE:
            await self._cores.release(core_key(args["key"]), args["epoch"], index)
            return None
        if op is LinkCall.GATHER:
            return await self._gather(LinkCall(args["what"]))
        if op is LinkCall.SHARE:
            shared = LinkCall(args["what"])
            self._remember(shared, args["args"])
            await self._share(index, shared, args["args"])
            return None
        raise ValueError(f"unknown call {op!r}")

    def _remember(self, op: LinkCall, args: dict[str, Any]) -> None:
        if op is LinkCall.LOAD:
            self._loads[args["name"]] = args["load"]
        elif op is LinkCall.UNLOAD:
            self._loads.pop(args["name"], None)

    def _serve_metrics(self) -> MetricsHttpServer | None:
        """Triton's metrics port: every frontend process's metrics, merged."""
        settings = self._settings
        if not settings.metrics_port or not settings.allow_metrics:
            return None

        async def merged() -> bytes:
            return merge_expositions(await self._gather(LinkCall.METRICS))

        address = settings.metrics_address or settings.host
        render = on_loop(asyncio.get_running_loop(), merged)
        port = MetricsHttpServer(address, settings.metrics_port, render)
        port.start()
        logger.info("Started Metrics Service at %s:%d", address, port.port)
        return port

    async def _gather(self, op: LinkCall) -> list[Any]:
        """Every frontend process's answer to `op`, leaving out those that went away (one
        restarting); a process whose handler failed fails the whole call, so that an
        exposition is never silently short of a process's series."""
        channels = list(self._channels.values())
        replies = await asyncio.gather(*(c.call(op) for c in channels), return_exceptions=True)
        for reply in replies:
            if isinstance(reply, BaseException) and not isinstance(reply, ChannelClosed):
                raise reply
        return [reply for reply in replies if not isinstance(reply, BaseException)]

    async def _share(self, origin: int, op: LinkCall, args: dict[str, Any]) -> None:
        others = [c for index, c in list(self._channels.items()) if index != origin]
        replies = await asyncio.gather(
            *(c.call(op, **args) for c in others), return_exceptions=True
        )
        for reply in replies:
            if isinstance(reply, RemoteError):
                raise reply
            if isinstance(reply, BaseException) and not isinstance(reply, ChannelClosed):
                raise reply
