"""Server subprocesses the bench starts: spawn, wait until ready, stop with their children."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil

READY_TIMEOUT_S = 300
STOP_TIMEOUT_S = 60
"""Time for a clean shutdown of a ready server (it may be draining requests)."""
STARTING_STOP_TIMEOUT_S = 10
"""A server still starting may not handle SIGTERM before it is up (vLLM's does not)."""
RUNNING: set[ServerProcess] = set()
"""Servers started and not yet stopped; `stop_all` is the safety net on the way out."""


class ServerError(RuntimeError):
    """A server did not start or did not answer."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports (held open together, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def server_env(**extra: str) -> dict[str, str]:
    """This process's environment for a server, without the bench's own vLLM log settings."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_LOGGING_CONFIG_PATH"}
    env.update(extra)
    return env


class ServerProcess:
    """One server: its command, its log file and the URL that says it is ready."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        base_url: str,
        ready_path: str,
        log_path: Path,
        env: dict[str, str],
        cwd: Path,
        grpc_url: str | None = None,
    ) -> None:
        self.name = name
        self.grpc_url = grpc_url
        """host:port of its gRPC frontend, when it has one."""
        self.argv = argv
        self.base_url = base_url
        self.ready_url = base_url + ready_path
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.ready = False

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        """Spawn in its own session, so a Ctrl-C reaches the bench only and the bench stops it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        RUNNING.add(self)

    async def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Poll `ready_url` until it answers 200; return the seconds it took."""
        assert self.process is not None
        start = time.monotonic()
        async with httpx.AsyncClient(timeout=2, trust_env=False) as client:
            while time.monotonic() - start < timeout_s:
                if self.process.poll() is not None:
                    raise ServerError(
                        f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}"
                    )
                try:
                    if (await client.get(self.ready_url)).status_code == 200:
                        self.ready = True
                        return time.monotonic() - start
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.5)
        raise ServerError(f"{self.name} not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL for it and any child left behind."""
        RUNNING.discard(self)
        if self.process is None:
            return None
        if timeout_s is None:
            timeout_s = STOP_TIMEOUT_S if self.ready else STARTING_STOP_TIMEOUT_S
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        killed = False
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                killed = True
        reap(children, timeout_s=1 if killed else 15)
        return self.process.returncode

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def reap(processes: list[psutil.Process], timeout_s: float = 15) -> None:
    """Give processes time to exit, then kill those still alive."""
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=5)


def stop_all() -> None:
    """Stop every server still running (after a Ctrl-C or a failure)."""
    for server in list(RUNNING):
        server.stop()


def descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def stop_new_descendants(before: set[int], timeout_s: float = 15) -> None:
    """The safety net: end processes this one started since `before` and left running (an
    engine core whose engine was being built when Ctrl-C came), but not multiprocessing's
    resource tracker, which exits with this process after cleaning up."""
    left = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and not is_resource_tracker(p)
    ]
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    reap(left, timeout_s)


def is_resource_tracker(process: psutil.Process) -> bool:
    try:
        return any("resource_tracker" in part for part in process.cmdline())
    except psutil.Error:
        return False
