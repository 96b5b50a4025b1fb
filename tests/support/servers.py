"""The real server as a subprocess (`python -m app`), started and stopped by the tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from app.paths import PROJECT_ROOT
from tests.support.asgi import free_ports

START_TIMEOUT_S = 300
STOP_TIMEOUT_S = 60
ARTIFACTS = PROJECT_ROOT / "tests" / "artifacts"


@dataclass
class RunningServer:
    """A server subprocess and the addresses it answers on (HTTP, and gRPC as host:port)."""

    process: subprocess.Popen
    base_url: str
    log_path: Path
    grpc_url: str = ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, list[psutil.Process]]:
        """Signal the server; return its exit code and any descendant still alive after it."""
        descendants = psutil.Process(self.process.pid).children(recursive=True)
        self.process.send_signal(sig)
        code = self.process.wait(timeout=STOP_TIMEOUT_S)
        _, alive = psutil.wait_procs(descendants, timeout=10)
        return code, alive


def start_server(*args: str, name: str = "server", env: dict[str, str] | None = None) -> RunningServer:
    """Start `python -m app` on free ports (HTTP, and gRPC unless `env` sets GRPC_PORT) and
    wait until every model is ready."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port, grpc_port = free_ports(2)
    env = {"GRPC_PORT": str(grpc_port), **(env or {})}
    log_path = ARTIFACTS / f"{name}-{port}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port), *args],
        cwd=PROJECT_ROOT,
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
    )
    grpc_url = f"127.0.0.1:{env['GRPC_PORT']}" if env["GRPC_PORT"] != "0" else ""
    server = RunningServer(process, f"http://127.0.0.1:{port}", log_path, grpc_url)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log_tail()}")
        try:
            if httpx.get(f"{server.base_url}/v2/health/ready", timeout=2).status_code == 200 and (
                not grpc_url or accepts_connections(grpc_url)
            ):
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    kill_tree(process.pid)
    raise RuntimeError(f"server not ready after {START_TIMEOUT_S} s:\n{server.log_tail()}")


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant (its engine processes would outlive it)."""
    try:
        parent = psutil.Process(pid)
        processes = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=10)
def accepts_connections(address: str) -> bool:
    """The gRPC port listens (it opens just after HTTP)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True
