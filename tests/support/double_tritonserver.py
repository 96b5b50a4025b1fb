"""`tritonserver` on the engine double, in a process of its own: the command line's whole path
(its flags, the log, the services it starts and their start-up lines, the drain on SIGTERM)
with tests/doubles.py's FakeEngine in place of vLLM's engines.

    python -m tests.support.double_tritonserver [tritonserver's flags]
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from app.paths import PROJECT_ROOT
from tests.support.waiting import wait_for

START_TIMEOUT_S = 120
"""vLLM's import (the double's sampling checks) takes seconds on a busy machine."""


@dataclass
class DoubleTritonserver:
    """The process, and where its standard output and error go."""

    process: subprocess.Popen[bytes]
    console: Path

    def listening_ports(self) -> set[int]:
        """The TCP ports the process listens on."""
        connections = psutil.Process(self.process.pid).net_connections("tcp")
        return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}

    def stop(self) -> int:
        """SIGTERM (the drain), then its exit code; SIGKILL if it outlives the drain."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@contextmanager
def double_tritonserver(
    *args: str,
    console: Path,
    started: str,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    open_files: int | None = None,
) -> Iterator[DoubleTritonserver]:
    """`tritonserver *args` on the double, in one frontend process (the double's engines live
    in it), with `env` added and at most `open_files` descriptors (its hard limit) if given;
    yields once the line `started` is in its log (`log`, else the console), and stops it
    when left."""
    command = [sys.executable, "-m", "tests.support.double_tritonserver"]
    with console.open("w") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [*command, "--frontend-processes=1", *args],
            cwd=PROJECT_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
            preexec_fn=None if open_files is None else lambda: limit_open_files(open_files),
        )
    server = DoubleTritonserver(process, console)
    watched = log or console
    try:
        wait_for(
            lambda: (
                process.poll() is not None or (watched.exists() and started in watched.read_text())
            ),
            timeout=START_TIMEOUT_S,
            interval=0.1,
        )
        assert process.poll() is None and started in watched.read_text(), console.read_text()
        yield server
    finally:
        server.stop()


def limit_open_files(limit: int) -> None:
    """In the child before it runs: at most `limit` open files, soft and hard."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def main() -> None:
    """tritonserver with the double's engines (vLLM is imported here, in the child only)."""
    import app.main
    from app.cli.main import main as tritonserver
    from app.repository.layout import accept_engine_args
    from tests.doubles import FakeEngine

    def double_engines(*_: Any, **__: Any) -> tuple[Any, ...]:
        return (lambda spec: FakeEngine()), accept_engine_args, (lambda spec: None)

    app.main.vllm_engines = double_engines
    tritonserver(sys.argv[1:])


if __name__ == "__main__":
    main()
