"""HTTP attacks on the real server (`python -m app`): 200 connections trickling their bodies
are answered 408 and closed at the deadline while health answers at once and the engine
stays up; 100 MB of request headers are refused 431 with the server's memory unmoved; no
answer shows a path on the server; DNS rebinding and KServe `infer` are refused."""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import threading
import time
from typing import Any

import httpx
import psutil

from app.paths import PROJECT_ROOT
from tests.integration.bounded.limits import BODY_TIMEOUT_S
from tests.support.servers import RunningServer

SLOW_CONNECTIONS = 200
WAIT_S = 60
BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


def address(server: RunningServer) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").split(":")
    return host, int(port)


def live_seconds(base_url: str) -> float:
    started = time.monotonic()
    assert httpx.get(f"{base_url}/v2/health/live", timeout=WAIT_S).status_code == 200
    return time.monotonic() - started


def trickle_until_answered(connections: list[socket.socket]) -> dict[socket.socket, bytes]:
    """Send each connection one body byte every half second until the server answers and
    closes it; what each received."""
    received = dict.fromkeys(connections, b"")
    with selectors.DefaultSelector() as selector:
        for connection in connections:
            selector.register(connection, selectors.EVENT_READ)
        deadline = time.monotonic() + BODY_TIMEOUT_S + WAIT_S
        while selector.get_map() and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                readable = key.fileobj
                assert isinstance(readable, socket.socket)
                chunk = read_some(readable)
                received[readable] += chunk
                if not chunk:
                    selector.unregister(readable)
            for key in list(selector.get_map().values()):
                with_byte(key.fileobj)
    return received


def read_some(connection: socket.socket) -> bytes:
    try:
        return connection.recv(65536)
    except ConnectionResetError:
        return b""


def with_byte(connection: Any) -> None:
    with contextlib.suppress(OSError):
        connection.sendall(b" ")


def test_slow_bodies_are_answered_408_while_health_answers_at_once(
    bounded: RunningServer,
) -> None:
    baseline = live_seconds(bounded.base_url)
    head = (
        b"POST /v2/models/smollm2/generate HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    )
    slow = [socket.create_connection(address(bounded)) for _ in range(SLOW_CONNECTIONS)]
    try:
        for connection in slow:
            connection.sendall(head)
        probes: list[float] = []
        prober = threading.Thread(
            target=lambda: probes.extend(live_seconds(bounded.base_url) for _ in range(5))
        )
        prober.start()
        started = time.monotonic()
        received = trickle_until_answered(slow)
        elapsed = time.monotonic() - started
        prober.join(WAIT_S)
    finally:
        for connection in slow:
            connection.close()
    answers = [response.split(b"\r\n", 1)[0] for response in received.values()]
    report = f"{answers.count(b'HTTP/1.1 408 Request Timeout')} of 408 in {elapsed:.1f} s"
    assert set(answers) <= {b"HTTP/1.1 408 Request Timeout", b""}, report
    assert answers.count(b"HTTP/1.1 408 Request Timeout") >= SLOW_CONNECTIONS * 0.9, report
    assert elapsed >= BODY_TIMEOUT_S * 0.9, report
    assert len(probes) == 5 and max(probes) < max(1.0, 20 * baseline), (probes, baseline)
    body = {"text_input": "Hello", "parameters": {"max_tokens": 4}}
    after = httpx.post(f"{bounded.base_url}/v2/models/smollm2/generate", json=body, timeout=120)
    assert after.status_code == 200, after.text


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def send_headers(server: RunningServer, total: int) -> tuple[bytes, float]:
    """`total` bytes of request headers in 256 KiB sends; the answer, and the seconds to it."""
    piece = b"X-Filler: " + b"a" * (256 * 1024 - 12) + b"\r\n"
    started = time.monotonic()
    with socket.create_connection(address(server), timeout=WAIT_S) as connection:
        connection.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(total // len(piece)):
                connection.sendall(piece)
        except OSError:
            pass  # closed after the answer: the rest was never taken
        answer = read_some(connection)
    return answer, time.monotonic() - started


def test_a_hundred_megabytes_of_headers_are_refused_with_memory_unmoved(
    bounded: RunningServer,
) -> None:
    pid = bounded.process.pid
    before = rss_mib(pid)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak.append(rss_mib(pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        answer, seconds = send_headers(bounded, 100 * 2**20)
    finally:
        done.set()
        sampler.join()
    assert answer.startswith(b"HTTP/1.1 431 ") or answer == b"", answer[:200]
    assert max(peak) - before < 32, f"RSS {before:.0f} MiB -> peak {max(peak):.0f} MiB"
    assert seconds < WAIT_S
    assert live_seconds(bounded.base_url) < WAIT_S


def server_paths() -> list[str]:
    """Paths on the server an answer must never show (the project holds the repository and
    the model's weights)."""
    return [str(PROJECT_ROOT), str(PROJECT_ROOT.resolve()), "/.cache/models"]


def test_no_answer_shows_a_path_on_the_server(http: httpx.Client) -> None:
    answers = [
        http.get("/v1/models"),
        http.get("/v1/models/smollm2"),
        http.get("/v2/models/smollm2"),
        http.get("/v2/models/smollm2/config"),
        http.post("/v2/repository/index", json={}),
        http.post("/v2/repository/models/smollm2/load", json={}),
        http.post("/v2/models/smollm2/generate", json={"text_input": "x", "parameters": "no"}),
        http.post("/v1/completions", json={"model": "nope", "prompt": "x"}),
        http.post("/v1/chat/completions", json={"model": "smollm2", "messages": "x"}),
    ]
    assert http.get("/v1/models").json()["data"][0]["root"] == "smollm2"
    for answer in answers:
        for path in server_paths():
            assert path not in answer.text, (str(answer.request.url), answer.text)


def test_a_dns_rebinding_page_is_refused_and_infer_gets_tritons_answer(
    http: httpx.Client,
) -> None:
    page = {"Host": "evil.example:8000", "Origin": "http://evil.example:8000"}
    refused = http.post("/v2/models/smollm2/generate", json={"text_input": "x"}, headers=page)
    assert refused.status_code == 403, refused.text
    read = http.get("/v1/models", headers={"Host": "evil.example:8000", "User-Agent": BROWSER})
    assert read.status_code == 403
    assert http.get("/v1/models", headers={"Host": "evil.example:8000"}).status_code == 200
    infer = http.post("/v2/models/smollm2/infer", content=json.dumps({"inputs": []}))
    assert infer.status_code == 501
    expected = "HTTP end point doesn't support models with decoupled transaction policy"
    assert infer.json() == {"error": expected}
