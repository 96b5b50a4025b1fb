"""Server subprocesses the bench starts: spawn, wait until ready, stop with their children."""

from __future__ import annotations

import asyncio
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
RUNNING: set[ServerProcess] = set()
"""Servers started and not yet stopped; `stop_all` is the safety net on the way out."""


class ServerError(RuntimeError):
    """A server did not start or did not answer."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    ) -> None:
        self.name = name
        self.argv = argv
        self.base_url = base_url
        self.ready_url = base_url + ready_path
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

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
                        return time.monotonic() - start
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.5)
        raise ServerError(f"{self.name} not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL for it and any child left behind."""
        RUNNING.discard(self)
        if self.process is None:
            return None
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        reap(children)
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
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def stop_all() -> None:
    """Stop every server still running (after a Ctrl-C or a failure)."""
    for server in list(RUNNING):
        server.stop(timeout_s=20)
