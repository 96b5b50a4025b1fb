"""The real server started as Triton's command line, `tritonserver ...` (the console script
the project installs), waited for until it is ready."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from app.paths import PROJECT_ROOT
from tests.support.servers import (
    ARTIFACTS,
    START_TIMEOUT_S,
    RunningServer,
    accepts_connections,
    kill_tree,
)

TRITONSERVER = Path(sys.executable).parent / "tritonserver"


def run_tritonserver(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run it to its end (a command line it refuses, a start that fails)."""
    return subprocess.run(
        [str(TRITONSERVER), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )


def start_tritonserver(
    *args: str,
    http_port: int,
    grpc_port: int | None,
    name: str,
    env: dict[str, str] | None = None,
    cwd: Path = PROJECT_ROOT,
) -> RunningServer:
    """Start `tritonserver *args` in `cwd` and wait until it is ready on `http_port` (and
    accepts connections on `grpc_port`)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log_path = ARTIFACTS / f"{name}-{http_port}.log"
    with log_path.open("w") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [str(TRITONSERVER), *args],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        )
    grpc_url = f"127.0.0.1:{grpc_port}" if grpc_port else ""
    server = RunningServer(process, f"http://127.0.0.1:{http_port}", log_path, grpc_url)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"tritonserver exited with {process.returncode}:\n{server.log_tail()}"
            )
        try:
            ready = httpx.get(f"{server.base_url}/v2/health/ready", timeout=2)
            if ready.status_code == 200 and (not grpc_url or accepts_connections(grpc_url)):
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    kill_tree(process)
    raise RuntimeError(f"tritonserver not ready after {START_TIMEOUT_S} s:\n{server.log_tail()}")
