"""Start-up takes every port before any engine loads: a port in use stops `python -m app` at
once, in one line naming the port and its setting and flag, without a traceback; once the
ports are taken, one log line lists them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.launch.ports import PortUnavailable, claim, ports_line
from app.paths import PROJECT_ROOT
from app.settings import Settings
from tests.support.asgi import free_ports

EXIT_LIMIT_S = 10.0
"""A clash ends the start within this (the program's imports take 1-3 s on a 2-core CPU)."""
RUN_TIMEOUT_S = 120


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other program listens on."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


def start(tmp_path: Path, ports: dict[str, int]) -> tuple[subprocess.CompletedProcess[str], float]:
    """`python -m app` on an empty repository with these ports (a start that gets past the
    ports serves no model); its output and how long it ran."""
    argv = [sys.executable, "-m", "app", "--http-address", "127.0.0.1"]
    argv += [f"--{flag}={port}" for flag, port in ports.items()]
    begun = time.monotonic()
    result = subprocess.run(
        [*argv, f"--model-repository={tmp_path}"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "FRONTEND_PROCESSES": "1"},
    )
    return result, time.monotonic() - begun


@pytest.mark.parametrize(
    ("flag", "names"),
    [
        ("http-port", "PORT / --http-port"),
        ("grpc-port", "GRPC_PORT / --grpc-port"),
        ("metrics-port", "METRICS_PORT / --metrics-port"),
    ],
)
def test_a_port_in_use_stops_the_start_at_once_in_one_line(
    tmp_path: Path, busy_port: int, flag: str, names: str
) -> None:
    ports = dict(zip(("http-port", "grpc-port", "metrics-port"), free_ports(3), strict=True))
    ports[flag] = busy_port
    result, seconds = start(tmp_path, ports)
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 1, lines
    assert seconds < EXIT_LIMIT_S, f"{seconds:.1f} s"
    assert len(lines) == 1, lines
    assert f"port {busy_port} ({names}) is in use" in lines[0]


def test_an_address_that_cannot_be_had_names_its_settings() -> None:
    settings = Settings(grpc_port=0, metrics_port=free_ports(1)[0], metrics_address="240.0.0.1")
    with pytest.raises(PortUnavailable) as refused:
        claim(settings, keep_http=False)
    message = str(refused.value)
    assert "cannot listen for metrics on 240.0.0.1:" in message
    assert "METRICS_ADDRESS / --metrics-address, METRICS_PORT / --metrics-port" in message


def test_the_http_port_is_kept_bound_and_every_port_is_listed() -> None:
    http_port, grpc_port, metrics_port = free_ports(3)
    settings = Settings(
        host="127.0.0.1", port=http_port, grpc_port=grpc_port, metrics_port=metrics_port
    )
    http = claim(settings, keep_http=True)
    assert http is not None
    with http:
        assert http.getsockname() == ("127.0.0.1", http_port)
        for released in (grpc_port, metrics_port):
            with socket.socket() as again:
                again.bind(("127.0.0.1", released))
        assert ports_line(settings, http) == (
            f"ports: HTTP 127.0.0.1:{http_port}, gRPC 127.0.0.1:{grpc_port}, "
            f"metrics 127.0.0.1:{metrics_port}"
        )


def test_services_that_are_off_take_no_port() -> None:
    settings = Settings(allow_http=False, grpc_port=0, allow_metrics=False)
    assert claim(settings, keep_http=True) is None
    assert ports_line(settings, None) == "ports: none (every service is off)"
