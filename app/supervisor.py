"""`FRONTEND_PROCESSES` > 1: the supervising process. It holds the HTTP port, runs each model
version's engine core, and spawns the worker processes that serve HTTP and gRPC (each on its
own SO_REUSEPORT socket) and the OpenAI routes as clients of those cores; SIGTERM drains every
worker, then stops the cores. A worker that dies after it was ready is started again (its
engines join fresh cores); one that dies before it was ever ready stops the whole group, as
`vllm serve` does."""

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
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from app.engine.shared_core import EngineCoreHost
from app.multiprocess.channel import STREAM_LIMIT, Channel, ChannelClosed, RemoteError
from app.multiprocess.cores import CoreHost, CoreKey, EngineCores
from app.multiprocess.metrics import merge_expositions
from app.multiprocess.ops import Op
from app.observability.log_control import LOG_CONTROL
from app.observability.metrics_server import MetricsHttpServer, on_loop
from app.repository.instances import ModelInstance
from app.repository.layout import ModelSpec
from app.settings import Settings

logger = logging.getLogger(__name__)

WORKER_RESTART_DELAY_SECONDS = 1.0
SUPERVISOR_SOCKET = "supervisor.sock"


def run(settings: Settings, count: int) -> None:
    """Serve with `count` frontend processes until stopped; exit with the group's status."""
    code = asyncio.run(Supervisor(settings, count).run())
    if code:
        raise SystemExit(code)


def core_host(
    key: CoreKey,
    engine_args: dict[str, Any],
    instance: dict[str, Any],
    clients: int,
    run_dir: Path,
) -> CoreHost:
    """The core of one instance of a model version (placed as `instance` says)."""
    placement = (ModelInstance.from_json(instance),) if instance else ()
    spec = ModelSpec(key[0], key[1], Path("."), engine_args, instances=placement)
    return EngineCoreHost(spec, clients, run_dir)


def core_key(key: dict[str, str]) -> CoreKey:
    """A core's key as a worker sends it: model, version, load and instance."""
    return key["model"], key["version"], key["load"], key.get("instance", "0")


def bind_shared_port(host: str, port: int) -> socket.socket:
    """A socket bound to the HTTP port with SO_REUSEPORT, so that each worker can listen on
    its own: the kernel then spreads new connections evenly over the workers, where on one
    shared listening socket whichever worker wakes first takes a whole burst of them. The
    supervisor's own socket never listens: it holds the port (a port in use fails here, at
    once) and fixes its number when PORT is 0."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


class Supervisor:
    def __init__(self, settings: Settings, count: int) -> None:
        self._settings = settings
        self._count = count
        self._run_dir = Path(tempfile.mkdtemp(prefix="tvg-frontends-"))
        self._cores = EngineCores(count, self._run_dir, core_host)
        self._processes: dict[int, BaseProcess] = {}
        self._channels: dict[int, Channel] = {}
        self._ready: set[int] = set()
        self._loads: dict[str, str] = {}
        """Model -> the token of its latest load, shared by every worker's engines."""
        self._stopping = asyncio.Event()
        self._draining: set[int] = set()
        self._signals = 0
        self._code = 0

    async def run(self) -> int:
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
            await self._wait_for_workers()
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
            target=run_worker,
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
            self._stop_workers()
            return
        self._ready.discard(index)
        logger.error("frontend %d exited (code %s): starting it again", index, process.exitcode)
        asyncio.get_running_loop().call_later(
            WORKER_RESTART_DELAY_SECONDS, self._respawn, index, settings, path
        )

    def _respawn(self, index: int, settings: Settings, path: str) -> None:
        if not self._stopping.is_set():
            self._spawn(index, settings, path)

    def _on_signal(self, sig: int) -> None:
        self._signals += 1
        logger.info(
            "%s: stopping the frontends%s",
            signal.Signals(sig).name,
            " now" if self._signals > 1 else "",
        )
        self._stop_workers()

    def _stop_workers(self) -> None:
        self._stopping.set()
        for index, process in self._processes.items():
            if process.is_alive() and process.pid is not None:
                self._draining.add(index)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    async def _wait_for_workers(self) -> None:
        """Join every worker; the group's status is that of the drains (a worker already dead
        when the stop came, e.g. waiting for its restart, does not count, nor one that our
        SIGTERM ended before it could take signals, e.g. a restarted one still starting)."""
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
        op, worker = Op(name), args.pop("worker")
        if op is Op.HELLO:  # a (re)started worker joins the current loads' cores
            self._channels[worker] = channel
            return self._loads
        if op is Op.READY:
            self._ready.add(worker)
            return None
        if op is Op.ACQUIRE:
            key = core_key(args["key"])
            return await self._cores.acquire(key, args["engine_args"], worker, args.get("instance"))
        if op is Op.RELEASE:
            await self._cores.release(core_key(args["key"]), args["epoch"], worker)
            return None
        if op is Op.GATHER:
            return await self._gather(Op(args["what"]))
        if op is Op.SHARE:
            shared = Op(args["what"])
            self._remember(shared, args["args"])
            await self._share(worker, shared, args["args"])
            return None
        raise ValueError(f"unknown call {op!r}")

    def _remember(self, op: Op, args: dict[str, Any]) -> None:
        if op is Op.LOAD:
            self._loads[args["name"]] = args["load"]
        elif op is Op.UNLOAD:
            self._loads.pop(args["name"], None)

    def _serve_metrics(self) -> MetricsHttpServer | None:
        """Triton's metrics port: every worker's metrics, merged."""
        settings = self._settings
        if not settings.metrics_port or not settings.allow_metrics:
            return None

        async def merged() -> bytes:
            return merge_expositions(await self._gather(Op.METRICS))

        address = settings.metrics_address or settings.host
        render = on_loop(asyncio.get_running_loop(), merged)
        port = MetricsHttpServer(address, settings.metrics_port, render)
        port.start()
        logger.info("Started Metrics Service at %s:%d", address, port.port)
        return port

    async def _gather(self, op: Op) -> list[Any]:
        """Every worker's answer to `op`, leaving out those that went away (a restarting
        worker); a worker whose handler failed fails the whole call, so that an exposition
        is never silently short of a process's series."""
        channels = list(self._channels.values())
        replies = await asyncio.gather(*(c.call(op) for c in channels), return_exceptions=True)
        for reply in replies:
            if isinstance(reply, BaseException) and not isinstance(reply, ChannelClosed):
                raise reply
        return [reply for reply in replies if not isinstance(reply, BaseException)]

    async def _share(self, origin: int, op: Op, args: dict[str, Any]) -> None:
        others = [c for index, c in list(self._channels.items()) if index != origin]
        replies = await asyncio.gather(
            *(c.call(op, **args) for c in others), return_exceptions=True
        )
        for reply in replies:
            if isinstance(reply, RemoteError):
                raise reply
            if isinstance(reply, BaseException) and not isinstance(reply, ChannelClosed):
                raise reply


def run_worker(index: int, settings: Settings, path: str, log_file: str = "") -> None:
    """A frontend process: the whole app (HTTP, gRPC, OpenAI) on clients of the shared cores;
    it listens once its engines are ready, so no connection waits on a starting worker. It
    logs where the supervisor does (`log_file`: its --log-file)."""
    from app.main import configure_logs, create_app, create_grpc_server
    from app.multiprocess.link import WorkerLink
    from app.server import serve

    configure_logs(settings, log_file)
    settings = settings.model_copy(update={"grpc_reuse_port": True})
    link = WorkerLink(index, path)
    app = create_app(settings, link=link)
    grpc_server = create_grpc_server(settings, app.state.runtime)
    http = bind_shared_port(settings.host, settings.port)
    serve(
        app,
        settings.host,
        settings.port,
        settings.log_level,
        grpc_server,
        sockets=[http],
        supervised=True,
    )
