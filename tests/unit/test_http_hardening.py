"""HTTP connections under attack (engine double, under uvicorn): a body that stops arriving
or trickles in is answered 408 and closed, request headers over the limit 431 as they
arrive, a client that leaves mid-body or mid-stream leaves one log line (no traceback), and
connections over the cap close the one waiting longest while probes are still served."""

from __future__ import annotations

import json
import logging
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.http.connections import ConnectionTable
from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.asgi import serve_in_thread
from tests.support.waiting import wait_until

Address = tuple[str, int]
WAIT_S = 30


@contextmanager
def served(
    repository: Path, engine: FakeEngine | None = None, **settings: Any
) -> Iterator[Address]:
    """The app under uvicorn (no metrics or gRPC port), with `settings`; its address."""
    app = create_app(
        Settings(model_repository=[repository], metrics_port=0, grpc_port=0, **settings),
        engine_factory=lambda spec: engine or FakeEngine(),
    )
    with serve_in_thread(app) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def post_head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def read_until_closed(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    connection.settimeout(WAIT_S)
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def status_and_body(response: bytes) -> tuple[str, dict[str, Any]]:
    head, _, body = response.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), json.loads(body)


@pytest.mark.parametrize(
    ("path", "error_of"),
    [
        ("/v2/models/fake/generate", lambda body: body["error"]),
        ("/v1/completions", lambda body: body["error"]["message"]),
    ],
)
def test_a_body_that_stops_arriving_is_answered_408_and_closed(
    repository: Path, path: str, error_of: Any
) -> None:
    with (
        served(repository, http_body_timeout_seconds=0.5) as address,
        socket.create_connection(address) as client,
    ):
        client.sendall(post_head(path, 1000) + b'{"text_input"')
        response = read_until_closed(client)
    status, body = status_and_body(response)
    assert status == "HTTP/1.1 408 Request Timeout"
    assert b"connection: close" in response.lower()
    assert error_of(body) == "the request body did not arrive within 0.5 s"


def test_a_body_trickled_in_is_cut_off_at_the_deadline_not_kept_alive_by_each_byte(
    repository: Path,
) -> None:
    with (
        served(repository, http_body_timeout_seconds=0.5) as address,
        socket.create_connection(address) as client,
    ):
        client.sendall(post_head("/v2/models/fake/generate", 10_000))
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not select.select([client], [], [], 0.05)[0]:
            client.sendall(b" ")
        assert time.monotonic() < deadline, "the trickle kept the request alive"
        try:
            status, _ = status_and_body(read_until_closed(client))
        except ConnectionResetError:
            # the server closed while the trickle's last bytes were on their way (a slow host)
            return
    assert status == "HTTP/1.1 408 Request Timeout"


def test_the_deadline_ends_with_the_body_not_with_the_response(repository: Path) -> None:
    """A body in two parts within the deadline is served, and a response that takes longer
    than the deadline (the server waits for the client to leave meanwhile) is not cut."""
    engine = FakeEngine(step_delay=0.3)
    body = json.dumps({"text_input": "x", "parameters": {"max_tokens": 10}}).encode()
    with (
        served(repository, engine, http_body_timeout_seconds=2) as address,
        socket.create_connection(address) as client,
    ):
        client.sendall(post_head("/v2/models/fake/generate", len(body)) + body[:5])
        time.sleep(0.1)
        client.sendall(body[5:])
        client.settimeout(WAIT_S)
        response = client.recv(65536)
    assert response.startswith(b"HTTP/1.1 200 OK"), response


@contextmanager
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The app's and uvicorn's records (uvicorn's loggers do not propagate to the root)."""
    uvicorn_logger = logging.getLogger("uvicorn")
    uvicorn_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            yield
    finally:
        uvicorn_logger.removeHandler(caplog.handler)


STREAM_BODY = json.dumps({"text_input": "x", "parameters": {"max_tokens": 100}}).encode()


@pytest.mark.parametrize(
    ("request_bytes", "read_first"),
    [
        (post_head("/v2/models/fake/generate", 1000) + b"0123456789", False),
        (post_head("/v1/completions", 1000) + b"0123456789", False),
        (post_head("/v2/models/fake/generate", len(STREAM_BODY)) + STREAM_BODY, False),
        (post_head("/v2/models/fake/generate_stream", len(STREAM_BODY)) + STREAM_BODY, True),
    ],
    ids=["mid-body", "mid-body-openai", "mid-response", "mid-stream"],
)
def test_a_client_that_leaves_leaves_one_log_line_and_no_traceback(
    repository: Path, caplog: pytest.LogCaptureFixture, request_bytes: bytes, read_first: bool
) -> None:
    with served(repository, FakeEngine(step_delay=0.05)) as address, server_log(caplog):
        with socket.create_connection(address) as client:
            client.sendall(request_bytes)
            if read_first:
                client.settimeout(WAIT_S)
                assert client.recv(65536).startswith(b"HTTP/1.1 200 OK")
            time.sleep(0.2)
        wait_until(lambda: any(r.name == "app.access" for r in caplog.records), WAIT_S)
        time.sleep(0.3)  # anything logged after the access line would show now
    assert [r for r in caplog.records if r.exc_info or "Exception" in r.getMessage()] == []
    assert len([r for r in caplog.records if r.name == "app.access"]) == 1


HEAD = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"
TOO_MUCH = {
    "whole": HEAD + b"X-Big: " + b"a" * 20 * 1024 + b"\r\n\r\n",
    "one-header-unfinished": HEAD + b"X-Big: " + b"a" * 2**20,
    "many-headers-unfinished": HEAD + b"".join(b"X-%d: a\r\n" % i for i in range(6000)),
}
"""Heads over 16 KiB: complete in one piece, or never finished (refused as they arrive)."""


def test_request_headers_under_the_limit_are_served(repository: Path) -> None:
    with (
        served(repository, max_request_header_bytes=16 * 1024) as address,
        socket.create_connection(address) as client,
    ):
        client.sendall(HEAD + b"X-Fits: " + b"a" * 12 * 1024 + b"\r\n\r\n")
        client.settimeout(WAIT_S)
        assert client.recv(65536).startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize("head", TOO_MUCH.values(), ids=TOO_MUCH.keys())
def test_request_headers_over_the_limit_are_refused_431_as_they_arrive(
    repository: Path, head: bytes
) -> None:
    with (
        served(repository, max_request_header_bytes=16 * 1024) as address,
        socket.create_connection(address) as client,
    ):
        client.sendall(head)
        status, body = status_and_body(read_until_closed(client))
    assert status == "HTTP/1.1 431 Request Header Fields Too Large"
    assert body == {"error": "request headers are larger than 16384 bytes"}


def test_the_connection_table_closes_the_one_waiting_longest_never_one_being_served() -> None:
    table = ConnectionTable(limit=3)
    assert [table.opened(name) for name in ("a", "b", "c")] == [None, None, None]
    table.serving("a")
    assert table.opened("d") == "b"  # a is being served: b has waited longest
    table.waiting("a")  # a's response is done: it waits again, last in line
    table.waiting("c")  # already waiting: keeps its place
    assert table.opened("e") == "c"
    for name in ("a", "d", "e"):
        table.serving(name)
    assert table.opened("f") == "f"  # every other is being served: the newcomer goes
    table.forget("a")
    assert len(table) == 2 and table.opened("g") is None


def test_over_the_connection_cap_slow_clients_give_way_and_probes_are_served(
    repository: Path,
) -> None:
    with served(repository, max_http_connections=20) as address:
        slow = [socket.create_connection(address) for _ in range(40)]
        try:
            for connection in slow:
                connection.sendall(b"GET /v2/health/live HTTP/1.1\r\n")  # never finished
            started = time.monotonic()
            answer = httpx.get(f"http://{address[0]}:{address[1]}/v2/health/live", timeout=WAIT_S)
            assert answer.status_code == 200
            assert time.monotonic() - started < WAIT_S / 3
            assert read_until_closed(slow[0]) == b""  # the longest waiting is closed
            slow[-1].settimeout(0.2)
            with pytest.raises(TimeoutError):  # the newest still waits for its request
                slow[-1].recv(1)
        finally:
            for connection in slow:
                connection.close()
