"""The real server as a subprocess (`python -m app`), started and stopped by the tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from app.paths import PROJECT_ROOT
from tests.support.asgi import free_ports

EXPLICIT_CONTROL_ENV = {"MODEL_CONTROL_MODE": "explicit", "LOAD_MODEL": '["*"]'}
"""Triton's explicit model control with every model loaded at start: load and unload are taken."""
START_TIMEOUT_S = 300
STOP_TIMEOUT_S = 60
CONTEXT_TOKENS = 1900
"""The most tokens a request to smollm2 may generate: its context is 2,048 tokens, and the
tests' prompts (in its chat template) are short."""
ARTIFACTS = PROJECT_ROOT / "tests" / "artifacts"


@dataclass
class RunningServer:
    """A server subprocess and the addresses it answers on (HTTP, and gRPC as host:port)."""

    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path
    grpc_url: str = ""
    metrics_url: str = ""
    """Triton's metrics port (`/metrics` there), when the server has one."""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, list[psutil.Process]]:
        """Signal the server; return its exit code and any descendant still alive after it."""
        descendants = psutil.Process(self.process.pid).children(recursive=True)
        self.process.send_signal(sig)
        code = self.process.wait(timeout=STOP_TIMEOUT_S)
        _, alive = psutil.wait_procs(descendants, timeout=10)
        return code, alive


def start_server(
    *args: str,
    name: str = "server",
    env: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> RunningServer:
    """Start `python -m app` on free ports (HTTP, the metrics port, and gRPC unless `env` sets
    GRPC_PORT) and wait until every model is ready; `tls`: the client context for a server on
    HTTPS. Unless `env` says otherwise, its engines hold 1 GiB of KV cache (46,000 tokens of
    the default model: `make test` runs several servers at once), and its stop may take 30 s
    past the drain before it exits 1 (an engine's stop takes some 5 s on a quiet 2-core host)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port, grpc_port, metrics_port = free_ports(3)
    env = {
        "GRPC_PORT": str(grpc_port),
        "METRICS_PORT": str(metrics_port),
        "CPU_KVCACHE_SPACE_GIB": "1",
        "SHUTDOWN_GRACE_SECONDS": "30",
        **(env or {}),
    }
    log_path = ARTIFACTS / f"{name}-{port}.log"
    with log_path.open("w") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=PROJECT_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
        )
    grpc_url = f"127.0.0.1:{env['GRPC_PORT']}" if env["GRPC_PORT"] != "0" else ""
    scheme = "http" if tls is None else "https"
    metrics_url = f"http://127.0.0.1:{env['METRICS_PORT']}" if env["METRICS_PORT"] != "0" else ""
    server = RunningServer(process, f"{scheme}://127.0.0.1:{port}", log_path, grpc_url, metrics_url)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log_tail()}")
        try:
            ready = httpx.get(f"{server.base_url}/v2/health/ready", timeout=2, verify=tls or True)
            if ready.status_code == 200 and (not grpc_url or accepts_connections(grpc_url)):
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    kill_tree(process)
    raise RuntimeError(f"server not ready after {START_TIMEOUT_S} s:\n{server.log_tail()}")


@contextlib.contextmanager
def stopping_cleanly(server: RunningServer) -> Iterator[RunningServer]:
    """Yield `server`; then SIGTERM it and check it exited 0 leaving no process behind."""
    yield server
    code, alive = server.stop(signal.SIGTERM)
    for process in alive:
        process.kill()
    assert code == 0 and not alive, server.log_tail()


MEASURING_REQUESTS = 2
"""How many requests `seconds_per_token` sends (the first may warm caches)."""


def seconds_per_token(base_url: str, model: str = "smollm2") -> float:
    """A real server's time per generated token on this host (hosts differ ~20x in speed): the
    best of MEASURING_REQUESTS 32-token requests. For sizing requests that must outlast, or
    end within, a given time."""
    body = {"text_input": "Count to fifty", "parameters": {"max_tokens": 32, "ignore_eos": True}}
    times = []
    for _ in range(MEASURING_REQUESTS):
        begun = time.monotonic()
        answer = httpx.post(f"{base_url}/v2/models/{model}/generate", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        times.append((time.monotonic() - begun) / 32)
    return min(times)


def tokens_for(per_token: float, seconds: float, low: int = 16, high: int = CONTEXT_TOKENS) -> int:
    """How many tokens one request decodes in about `seconds` at `per_token` (measured by
    `seconds_per_token`), within [low, high]."""
    return max(low, min(high, round(seconds / per_token)))


def kill_tree(popen: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process and every descendant (its engine processes would outlive it), then
    reap it through its Popen, which would otherwise warn that it still runs."""
    try:
        parent = psutil.Process(popen.pid)
        processes = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        processes = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(processes, timeout=10)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=10)


def accepts_connections(address: str) -> bool:
    """The gRPC port listens (it opens just after HTTP)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True


def tracebacks_of_ours(server: RunningServer) -> list[str]:
    """Lines of a server's log that start a Python traceback, but for the engine core's own."""
    lines = server.log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if "Traceback" in line and "EngineCore" not in line]
