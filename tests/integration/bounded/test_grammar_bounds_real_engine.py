"""Structured-output grammars are compiled in grammar workers, never in the server: a grammar
whose compile runs past GRAMMAR_COMPILE_TIMEOUT_SECONDS is a 400 naming structured_outputs
soon after, while the server keeps answering; a client that leaves mid-compile has its
worker killed (its CPU freed); and grammars the limits admit do not grow the server. The
slow grammar is a 175,000-entry JSON enum (about 2 MiB), past the deadline on any host here
(a 1 MiB one compiles in 270 s on 2 cores; on a host 20x as fast, some 13 s: this one is
some 5x slower still), admitted by a server whose MAX_GRAMMAR_BYTES lets it through."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from tests.integration.bounded.limits import DEADLINE_S
from tests.support.probe import readiness_probe
from tests.support.servers import RunningServer

SLACK_S = 10
"""What the refusal may take beyond the deadline (the body read, the job sent, the kill)."""
WAIT_S = 120.0
"""Generous bound on a worker's start or a kill on a slow host."""
LIVE_LIMIT_S = 1.0
GROWTH_LIMIT_MB = 300
SLOW_ENUM = [f"w{i:07d}" for i in range(175_000)]
ROUTES = {
    "triton": ("/v2/models/smollm2/generate", "parameters.structured_outputs"),
    "openai": ("/v1/completions", "structured_outputs"),
}


def body_of(route: str, structured: dict[str, Any]) -> bytes:
    """A one-token request of `route` ('triton' or 'openai') with this grammar."""
    if route == "triton":
        parameters = {"max_tokens": 1, "structured_outputs": structured}
        return json.dumps({"text_input": "Hi", "parameters": parameters}).encode()
    body = {"model": "smollm2", "prompt": "Hi", "max_tokens": 1, "structured_outputs": structured}
    return json.dumps(body).encode()


def post(server: RunningServer, route: str, structured: dict[str, Any]) -> httpx.Response:
    path, _ = ROUTES[route]
    return httpx.post(
        f"{server.base_url}{path}",
        content=body_of(route, structured),
        headers={"content-type": "application/json"},
        timeout=WAIT_S + DEADLINE_S,
    )


def error_of(response: httpx.Response) -> str:
    error = response.json()["error"]
    return str(error["message"] if isinstance(error, dict) else error)


def grammar_workers(server: RunningServer) -> list[psutil.Process]:
    """The server's grammar workers (named so by setproctitle)."""
    root = psutil.Process(server.process.pid)
    found = []
    for child in root.children(recursive=True):
        try:
            if "grammar-worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def ready_worker(server: RunningServer, route: str) -> psutil.Process:
    """The server's one grammar worker, started and idle (a small grammar went through it)."""
    answer = post(server, route, {"json": {"type": "object"}})
    assert answer.status_code == 200, answer.text
    workers = grammar_workers(server)
    assert len(workers) == 1, workers
    return workers[0]


def wait_until(condition: Callable[[], bool], what: str) -> float:
    """The time `condition` first held (polled; at most WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)
    return time.monotonic()


def gone(process: psutil.Process) -> bool:
    try:
        return bool(process.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_grammar_past_the_deadline_is_a_400_while_the_server_answers(
    bounded: RunningServer, route: str
) -> None:
    worker = ready_worker(bounded, route)
    with readiness_probe(bounded.base_url) as probe:
        started = time.monotonic()
        answer = post(bounded, route, {"json": {"enum": SLOW_ENUM}})
        seconds = time.monotonic() - started
    print(f"\n{route}: {answer.status_code} in {seconds:.1f} s; readiness {probe.worst:.2f} s")
    _, field = ROUTES[route]
    assert answer.status_code == 400, answer.text[:300]
    reason = f"the grammar is too large to compile within {DEADLINE_S} s"
    assert error_of(answer) == f"{field}: {reason}"
    assert seconds < DEADLINE_S + SLACK_S
    assert not probe.failures and probe.worst < LIVE_LIMIT_S, (probe.worst, probe.failures[:3])
    wait_until(lambda: gone(worker), "the worker past its deadline is killed")
    assert post(bounded, route, {"regex": "[a-z]{3}"}).status_code == 200


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_client_that_leaves_mid_compile_has_its_worker_killed(
    bounded: RunningServer, route: str
) -> None:
    """The worker is gone well before the deadline would have killed it: its CPU is free."""
    worker = ready_worker(bounded, route)
    idle_cpu = cpu_seconds(worker)
    path, _ = ROUTES[route]
    url = urlsplit(bounded.base_url)
    body = body_of(route, {"json": {"enum": SLOW_ENUM}})
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname, url.port or 80)) as client:
        sent = time.monotonic()
        client.sendall(head + body)
        wait_until(lambda: cpu_seconds(worker) > idle_cpu + 0.3, "the worker compiles")
    left = time.monotonic()
    killed = wait_until(lambda: gone(worker), "the worker of the client that left is killed")
    print(f"\n{route}: left {left - sent:.1f} s after sending; killed {killed - left:.2f} s later")
    assert killed - sent < DEADLINE_S, "killed by the deadline, not by the client's leaving"
    assert post(bounded, route, {"regex": "[a-z]{3}"}).status_code == 200


def admitted_grammar(index: int) -> dict[str, Any]:
    """A grammar of about 58 KB (under the default MAX_GRAMMAR_BYTES), of one of four kinds,
    its words its own: each compiles anew."""
    words = [f"g{index:02d}w{j:05d}" for j in range(4200)]
    kind = index % 4
    if kind == 0:
        return {"choice": words}
    if kind == 1:
        names = words[:1250]
        properties = {name: {"type": "string"} for name in names}
        return {"json": {"type": "object", "properties": properties, "required": names}}
    if kind == 2:
        return {"regex": "(" + "|".join(words) + ")"}
    return {"grammar": "root ::= " + " | ".join(f'"{word}"' for word in words[:3700])}


def test_admitted_grammars_do_not_grow_the_server(server: RunningServer) -> None:
    """Twenty distinct grammars, each near the default limit, compiled: the server's own
    memory stays put (they are compiled in its grammar worker, which stays in its bound)."""
    for index in range(2):
        assert post(server, "triton", admitted_grammar(index)).status_code == 200
    root = psutil.Process(server.process.pid)
    before = root.memory_info().rss
    for index in range(2, 22):
        structured = admitted_grammar(index)
        assert len(json.dumps(structured)) < 65536
        answer = post(server, "triton", structured)
        assert answer.status_code == 200, answer.text[:300]
    grown_mb = (root.memory_info().rss - before) / 2**20
    workers_mb = [worker.memory_info().rss / 2**20 for worker in grammar_workers(server)]
    print(f"\nserver grew {grown_mb:.0f} MB; grammar workers {workers_mb} MB")
    assert grown_mb < GROWTH_LIMIT_MB
    assert workers_mb and all(size < 2048 for size in workers_mb)
