"""Floods of connections cost the server neither its open files nor its threads. gRPC: past
MAX_GRPC_CONNECTIONS they are closed as they open, one without a call is closed after
GRPC_MAX_CONNECTION_IDLE_SECONDS, one that never begins HTTP/2 after HTTP_HEADER_TIMEOUT_SECONDS,
and HTTP and gRPC keep answering. The metrics port: a thread
for at most 64 connections, each held to a timeout. At start the server raises its soft
open-file limit within the hard one, and warns when that stays below what its connection
limits need. (HTTP's own bounds: test_http_hardening.py.)"""

from __future__ import annotations

import asyncio
import resource
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from app.launch.open_files import RESERVED_FILES
from app.observability.metrics_server import MetricsHttpServer
from app.paths import PROJECT_ROOT
from tests.doubles import FakeEngine
from tests.support.asgi import free_ports
from tests.support.double_tritonserver import double_tritonserver
from tests.support.triton_grpc import serve_grpc_app
from tests.support.waiting import wait_for
from tests.unit.test_tritonserver_double import flags

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")
"""What a gRPC client sends first: HTTP/2's preface and an empty SETTINGS frame."""
SERVER_FILES = 600
"""The server's open-file limit in the flood test (soft and hard)."""
MAX_CONNECTIONS = 100
"""MAX_GRPC_CONNECTIONS and MAX_HTTP_CONNECTIONS there: with the reserve, within its limit."""
FLOOD = 900
"""Connections the flood opens: more than the server could hold open files for."""
IDLE_S = 2
WAIT_S = 60


@pytest.fixture
def descriptors() -> Iterator[None]:
    """Room in this process for the flood's sockets (the soft limit raised, then put back)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FLOOD + 256
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"this process may open {hard} files, the flood needs {wanted}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def flood(address: tuple[str, int], count: int) -> list[socket.socket]:
    """`count` connections that each begin HTTP/2 as a gRPC client does, then stay silent."""
    opened = []
    for _ in range(count):
        connection = socket.create_connection(address, timeout=5)
        opened.append(connection)
        try:
            connection.sendall(HTTP2_PREFACE)
        except OSError:
            continue  # closed at once by the server
    return opened


def still_open(connection: socket.socket) -> bool:
    """Whether the server has not closed the connection (what it sent is read and dropped)."""
    connection.setblocking(False)
    try:
        while chunk := connection.recv(65536):
            del chunk
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def test_a_flood_of_grpc_connections_leaves_http_and_grpc_answering(
    repository: Path, tmp_path: Path, descriptors: None
) -> None:
    http, grpc_port, metrics = free_ports(3)
    limits = {
        "MAX_GRPC_CONNECTIONS": str(MAX_CONNECTIONS),
        "MAX_HTTP_CONNECTIONS": str(MAX_CONNECTIONS),
        "GRPC_MAX_CONNECTION_IDLE_SECONDS": str(IDLE_S),
    }
    with double_tritonserver(
        *flags(repository, http, grpc_port, metrics),
        console=tmp_path / "console.log",
        started="Started GRPCInferenceService at",
        env=limits,
        open_files=SERVER_FILES,
    ) as server:
        connections = flood(("127.0.0.1", grpc_port), FLOOD)
        try:
            live = httpx.get(f"http://127.0.0.1:{http}/v2/health/live", timeout=10)
            assert live.status_code == 200
            held = sum(still_open(connection) for connection in connections)
            assert held <= MAX_CONNECTIONS, f"{held} of {FLOOD} connections held"
            assert wait_for(lambda: not any(map(still_open, connections)), WAIT_S, 0.2), (
                "idle connections kept open"
            )
        finally:
            for connection in connections:
                connection.close()
        with triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            assert client.is_server_live()
        assert server.stop() == 0
    console = server.console.read_text()
    assert "open-file limit" not in console, console


async def stream_outcomes(address: str, count: int) -> list[grpc.StatusCode | None]:
    """Open `count` ModelStreamInfer streams on one connection, each sending nothing: the
    status each ended with at once (None: still open), before all are cancelled."""

    async def silent() -> AsyncIterator[service_pb2.ModelInferRequest]:
        await asyncio.Event().wait()
        yield service_pb2.ModelInferRequest()

    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        calls = [stub.ModelStreamInfer(silent()) for _ in range(count)]
        await asyncio.sleep(1)
        outcomes = [await ended(call) for call in calls]
        for call in calls:
            call.cancel()
        return outcomes


async def ended(call: Any) -> grpc.StatusCode | None:
    try:
        return await asyncio.wait_for(asyncio.shield(call.code()), 0.05)
    except asyncio.TimeoutError:
        return None


def test_idle_grpc_streams_past_the_call_limit_are_resource_exhausted(repository: Path) -> None:
    """An idle stream holds some 20 KB of the server: one connection opening thousands of
    them is bounded by MAX_GRPC_CALLS, and the server answers calls again once they end."""
    with serve_grpc_app(repository, lambda spec: FakeEngine(), max_grpc_calls=50) as served:
        outcomes = asyncio.run(stream_outcomes(served.grpc_url, 150))
        assert outcomes.count(None) == 50, outcomes
        assert outcomes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 100, outcomes
        with triton_grpc.InferenceServerClient(served.grpc_url) as client:
            assert wait_for(client.is_server_live, WAIT_S)


def test_a_grpc_connection_that_never_begins_http2_is_closed_at_the_header_deadline(
    repository: Path,
) -> None:
    """A client that opens connections and sends nothing (not even HTTP/2's preface) holds
    each for HTTP_HEADER_TIMEOUT_SECONDS, not for grpc's own 120 s; calls go on meanwhile."""
    settings = {"http_header_timeout_seconds": IDLE_S}
    with serve_grpc_app(repository, lambda spec: FakeEngine(), **settings) as served:
        host, port = served.grpc_url.rsplit(":", 1)
        silent = [socket.create_connection((host, int(port)), timeout=5) for _ in range(5)]
        try:
            with triton_grpc.InferenceServerClient(served.grpc_url) as client:
                assert client.is_server_live()
            assert all(map(still_open, silent))
            assert wait_for(lambda: not any(map(still_open, silent)), 10 * IDLE_S, 0.2), (
                "silent connections kept open"
            )
        finally:
            for connection in silent:
                connection.close()


def test_a_flood_of_metrics_port_connections_holds_neither_threads_nor_the_port() -> None:
    port = MetricsHttpServer(
        "127.0.0.1", 0, lambda: b"up 1\n", max_connections=8, connection_timeout=IDLE_S
    )
    port.start()
    threads = threading.active_count()
    connections = [socket.create_connection(("127.0.0.1", port.port), 5) for _ in range(200)]
    try:
        assert threading.active_count() <= threads + 8
        assert wait_for(lambda: not any(map(still_open, connections)), WAIT_S, 0.2), (
            "silent connections kept open"
        )
        assert wait_for(lambda: threading.active_count() == threads, WAIT_S)
        scrape = httpx.get(f"http://127.0.0.1:{port.port}/metrics", timeout=10)
        assert (scrape.status_code, scrape.text) == (200, "up 1\n")
    finally:
        for connection in connections:
            connection.close()
        port.stop()


def limit_after_start(soft: int, hard: int, needed: int) -> tuple[int, str]:
    """The soft open-file limit a process started with (`soft`, `hard`) has once
    `raise_open_file_limit(needed)` ran, and what it logged."""
    code = (
        "import logging, resource, sys\n"
        "logging.basicConfig(stream=sys.stdout, format='%(levelname)s %(message)s')\n"
        "from app.launch.open_files import raise_open_file_limit\n"
        f"raise_open_file_limit({needed})\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
    )
    *logged, limit = run.stdout.strip().splitlines()
    return int(limit), "\n".join(logged)


def test_the_soft_limit_is_raised_within_the_hard_one() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard open-file limit here is {hard}")
    limit, logged = limit_after_start(256, 2048, 1000)
    assert (limit, logged) == (2048, "")


def test_a_hard_limit_below_the_connection_limits_is_a_warning_naming_them() -> None:
    limit, logged = limit_after_start(256, 512, 4096 + 4096 + RESERVED_FILES)
    assert limit == 512
    assert logged.startswith("WARNING the open-file limit is 512 (hard limit 512), below the")
    assert "MAX_HTTP_CONNECTIONS and MAX_GRPC_CONNECTIONS" in logged
