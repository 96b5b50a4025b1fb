"""Idle HTTP connections (engine double): kept for the client's next request longer than the
idle timeouts of the usual clients and load balancers, so that they close a connection first
and never send a request on one the server is closing (a request lost to a reset); many
left idle by one client keep no other client out."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.asgi import serve_in_thread

READY = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
UVICORN_KEEP_ALIVE = 5
"""uvicorn's default (and `vllm serve`'s): a pool that keeps connections longer than this
(aiohttp 15 s, `vllm bench serve` 60 s, Go 90 s) meets connections the server has closed."""


@contextmanager
def connected(repository: Path, **settings: Any) -> Iterator[socket.socket]:
    """A connection to the app under uvicorn, with `settings`."""
    app = create_app(
        Settings(model_repository=[repository], **settings),
        engine_factory=lambda spec: FakeEngine(),
    )
    with serve_in_thread(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            yield connection


def ready(connection: socket.socket) -> bytes:
    """A readiness request on `connection`; the response's status line, or b"" if closed."""
    connection.sendall(READY)
    return connection.recv(4096).split(b"\r\n", 1)[0]


def test_the_default_keeps_an_idle_connection_past_uvicorns_five_seconds(
    repository: Path,
) -> None:
    assert Settings().http_keep_alive_seconds > 60
    with connected(repository) as connection:
        assert ready(connection) == b"HTTP/1.1 200 OK"
        time.sleep(UVICORN_KEEP_ALIVE + 1)
        assert ready(connection) == b"HTTP/1.1 200 OK"


def test_an_idle_connection_is_closed_once_the_keep_alive_ends(repository: Path) -> None:
    with connected(repository, http_keep_alive_seconds=0.5) as connection:
        assert ready(connection) == b"HTTP/1.1 200 OK"
        time.sleep(0.1)
        assert ready(connection) == b"HTTP/1.1 200 OK"
        closed_by = time.monotonic() + UVICORN_KEEP_ALIVE - 1
        assert connection.recv(4096) == b""  # the server closes it
        assert time.monotonic() < closed_by


IDLE_CONNECTIONS = 300
"""Connections an attacker leaves idle after a request each (the test process holds both ends
of each, so the count stays far below the open-file limit)."""


def test_connections_left_idle_do_not_keep_others_from_being_served(repository: Path) -> None:
    with connected(repository) as first:
        address = first.getpeername()
        idle = [socket.create_connection(address, timeout=10) for _ in range(IDLE_CONNECTIONS)]
        try:
            assert {ready(connection) for connection in idle} == {b"HTTP/1.1 200 OK"}
            started = time.monotonic()
            with socket.create_connection(address, timeout=10) as newcomer:
                assert ready(newcomer) == b"HTTP/1.1 200 OK"
            assert ready(first) == b"HTTP/1.1 200 OK"
            assert time.monotonic() - started < 5
        finally:
            for connection in idle:
                connection.close()
