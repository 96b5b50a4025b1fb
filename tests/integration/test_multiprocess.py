"""Two frontend processes sharing one engine core (FRONTEND_PROCESSES=2) against the real
engine: the same text as the single-process server, one aggregated /metrics, repository
changes made in both processes, disconnects that abort engine work, and a drain on SIGTERM."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.integration.test_metrics_and_health import scrape
from tests.support.servers import (
    EXPLICIT_CONTROL_ENV,
    RunningServer,
    seconds_per_token,
    start_server,
    tokens_for,
)
from tests.support.waiting import wait_for

GENERATE = "/v2/models/smollm2/generate"
STREAM = "/v2/models/smollm2/generate_stream"
GREEDY: dict[str, Any] = {
    "text_input": "What is Triton Inference Server?",
    "parameters": {"temperature": 0, "max_tokens": 16},
}
FULL_LENGTH: dict[str, Any] = {
    "text_input": GREEDY["text_input"],
    "return_finish_reason": True,
    "return_num_output_tokens": True,
    "parameters": {**GREEDY["parameters"], "ignore_eos": True},
}
"""GREEDY to its full length, for requests sent together: batched decoding on the CPU is not
batch-invariant, so their text may differ from a lone request's; their length may not."""
PROCESS_HEADER = "x-frontend-process"


@pytest.fixture(scope="module")
def group() -> Iterator[RunningServer]:
    env = {
        "FRONTEND_PROCESSES": "2",
        "DRAIN_TIMEOUT_SECONDS": "20",
        **EXPLICIT_CONTROL_ENV,
    }
    server = start_server(name="frontends", env=env)
    yield server
    if server.process.poll() is None:
        server.stop(signal.SIGTERM)


@pytest.fixture
def group_http(group: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=group.base_url, timeout=120) as client:
        yield client


def concurrently(count: int, call: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """`count` requests at once, each on its own connection (so both processes accept some)."""
    results: list[httpx.Response] = []

    def one() -> None:
        results.append(call())

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def post(base_url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(base_url + path, json=body, timeout=120)


def one_at_a_time(base_url: str, attempts: int = 40) -> dict[str, list[httpx.Response]]:
    """GREEDY sent alone, one request after another, each on a new connection (the kernel
    spreads those over the processes), until both processes have answered: the responses by
    the process that answered."""
    answered: dict[str, list[httpx.Response]] = {}
    for _ in range(attempts):
        response = post(base_url, GENERATE, GREEDY)
        answered.setdefault(response.headers.get(PROCESS_HEADER, ""), []).append(response)
        if {"0", "1"} <= set(answered):
            break
    return answered


def check_full_length(responses: list[httpx.Response]) -> None:
    """Each of FULL_LENGTH's responses: 200, every token, finished by the length limit."""
    assert {r.status_code for r in responses} == {200}, [r.text for r in responses]
    tokens = FULL_LENGTH["parameters"]["max_tokens"]
    assert {(r.json()["num_output_tokens"], r.json()["finish_reason"]) for r in responses} == {
        (tokens, "length")
    }


def test_two_frontend_processes_share_one_engine_core(group: RunningServer) -> None:
    children = psutil.Process(group.process.pid).children()
    frontends = frontend_processes(group)
    cores = [p for p in children if "EngineCore" in p.name()]
    assert len(frontends) == 2 and len(cores) == 1, [p.name() for p in children]
    for frontend in frontends:
        assert not [p for p in frontend.children(recursive=True) if "EngineCore" in p.name()]


def test_both_processes_answer_the_single_process_text(
    group: RunningServer, http: httpx.Client
) -> None:
    """Alone, each process's greedy text is the single-process server's; together, requests
    are all answered in full (their text may differ: batched decoding on the CPU is not
    batch-invariant)."""
    expected = http.post(GENERATE, json=GREEDY).json()["text_output"]
    answered = one_at_a_time(group.base_url)
    assert set(answered) == {"0", "1"}, set(answered)
    responses = [r for each in answered.values() for r in each]
    assert {r.status_code for r in responses} == {200}
    assert {r.json()["text_output"] for r in responses} == {expected}
    seen: set[str] = set()
    for _ in range(10):
        together = concurrently(8, lambda: post(group.base_url, GENERATE, FULL_LENGTH))
        check_full_length(together)
        seen |= {r.headers[PROCESS_HEADER] for r in together}
        if seen == {"0", "1"}:
            break
    assert seen == {"0", "1"}


def listening_sockets(port: int) -> list[str]:
    """The inodes of the TCP sockets listening on `port` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                found.append(fields[9])
    return found


def test_each_process_listens_on_its_own_socket_and_a_burst_of_connections_spreads(
    group: RunningServer,
) -> None:
    """SO_REUSEPORT: the kernel spreads new connections over the processes' own sockets (on
    one shared socket, whichever process wakes first accepts a burst: 20/44 splits seen)."""
    port = int(group.base_url.rsplit(":", 1)[1])
    sockets = listening_sockets(port)
    assert len(sockets) == 2 and len(set(sockets)) == 2, sockets
    for _ in range(3):
        responses = concurrently(
            64, lambda: httpx.get(group.base_url + "/v2/health/live", timeout=30)
        )
        shares = [r.headers[PROCESS_HEADER] for r in responses].count("0")
        assert 16 <= shares <= 48, shares


def test_metrics_count_the_requests_of_every_process(
    group: RunningServer, group_http: httpx.Client
) -> None:
    before = scrape(group_http)
    responses = concurrently(12, lambda: post(group.base_url, GENERATE, FULL_LENGTH))
    assert [r.status_code for r in responses] == [200] * 12
    after = scrape(group_http)
    assert (
        after["nv_inference_request_success_total"]
        - before.get("nv_inference_request_success_total", 0)
        == 12
    )
    generated = after["vllm:generation_tokens_total"] - before.get(
        "vllm:generation_tokens_total", 0
    )
    assert generated == 12 * FULL_LENGTH["parameters"]["max_tokens"]
    assert after["server_requests_in_flight"] == 0


def test_the_metrics_port_serves_every_process(
    group: RunningServer, group_http: httpx.Client
) -> None:
    """Triton's metrics port, served by the supervising process, merges the same series."""
    assert concurrently(4, lambda: post(group.base_url, GENERATE, GREEDY))
    on_port = scrape(group_http, f"{group.metrics_url}/metrics")
    assert (
        on_port["nv_inference_request_success_total"]
        == scrape(group_http)["nv_inference_request_success_total"]
    )
    assert on_port["nv_inference_pending_request_count"] == 0


def test_a_trace_setting_changed_in_one_process_is_every_processs(group: RunningServer) -> None:
    changed = httpx.post(f"{group.base_url}/v2/trace/setting", json={"trace_rate": "9"}, timeout=30)
    assert changed.status_code == 200 and changed.json()["trace_rate"] == "9"
    readings = concurrently(16, lambda: httpx.get(f"{group.base_url}/v2/trace/setting", timeout=30))
    assert {r.headers[PROCESS_HEADER] for r in readings} == {"0", "1"}
    assert {r.json()["trace_rate"] for r in readings} == {"9"}
    httpx.post(f"{group.base_url}/v2/trace/setting", json={"trace_rate": None}, timeout=30)


def test_closed_streams_leave_no_engine_work(
    group: RunningServer, group_http: httpx.Client
) -> None:
    body = {
        "text_input": "Tell me a long story.",
        "parameters": {"max_tokens": 400, "ignore_eos": True},
    }

    def open_and_close() -> httpx.Response:
        with (
            httpx.Client(base_url=group.base_url, timeout=120) as client,
            client.stream("POST", STREAM, json=body) as response,
        ):
            next(response.iter_lines())
            return response

    responses = concurrently(8, open_and_close)
    assert {r.headers[PROCESS_HEADER] for r in responses} <= {"0", "1"}
    assert wait_for(lambda: scrape(group_http)["server_engine_requests_unfinished"] == 0, 30, 0.5)
    assert scrape(group_http)["server_requests_in_flight"] == 0


def test_unload_and_load_apply_to_every_process(
    group: RunningServer, group_http: httpx.Client
) -> None:
    assert group_http.post("/v2/repository/models/smollm2/unload").status_code == 200
    statuses = concurrently(8, lambda: post(group.base_url, GENERATE, GREEDY))
    assert {r.status_code for r in statuses} == {404}
    assert group_http.post("/v2/repository/models/smollm2/load").status_code == 200
    check_full_length(concurrently(8, lambda: post(group.base_url, GENERATE, FULL_LENGTH)))
    answered = one_at_a_time(group.base_url)
    assert set(answered) == {"0", "1"}, set(answered)
    responses = [r for each in answered.values() for r in each]
    assert {r.status_code for r in responses} == {200}
    assert len({r.json()["text_output"] for r in responses}) == 1
    cores = [p for p in psutil.Process(group.process.pid).children() if "EngineCore" in p.name()]
    assert len(cores) == 1


def test_a_log_setting_applies_in_every_process(
    group: RunningServer, group_http: httpx.Client
) -> None:
    """Triton's logging extension, answered by one process, changes the others' logs too."""
    assert group_http.post("/v2/logging", json={"log_info": False}).json()["log_info"] is False
    try:
        seen: dict[str, bool] = {}
        for _ in range(10):
            for answer in concurrently(
                8, lambda: httpx.get(group.base_url + "/v2/logging", timeout=30)
            ):
                seen[answer.headers[PROCESS_HEADER]] = answer.json()["log_info"]
            if len(seen) == 2:
                break
        assert seen == {"0": False, "1": False}
    finally:
        group_http.post("/v2/logging", json={"log_info": True})


def frontend_processes(group: RunningServer) -> list[psutil.Process]:
    """The live frontend processes (a killed one is a zombie until the supervisor reaps it)."""
    return [
        p
        for p in psutil.Process(group.process.pid).children()
        if "spawn_main" in " ".join(command_line(p))
    ]


def serving_frontends(group: RunningServer) -> int:
    """Frontend processes that have started serving, by their log lines."""
    return group.log_path.read_text(errors="replace").count("Started HTTPService at")


def command_line(process: psutil.Process) -> list[str]:
    try:
        line: list[str] = process.cmdline()
        return line
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return []


def test_a_killed_frontend_process_is_started_again(
    group: RunningServer, http: httpx.Client
) -> None:
    expected = http.post(GENERATE, json=GREEDY).json()["text_output"]
    killed = frontend_processes(group)[0]
    killed.kill()
    assert wait_for(
        lambda: (
            len(frontend_processes(group)) == 2
            and killed.pid not in {p.pid for p in frontend_processes(group)}
        ),
        60,
        0.5,
    )

    served: set[str] = set()

    def both_serve() -> bool:
        """Alone, one request after another (so that the text is comparable), until each
        process has given the expected text once."""
        try:
            answered = one_at_a_time(group.base_url, 8)
        except httpx.TransportError:  # the new process not yet serving
            return False
        for process, responses in answered.items():
            texts = {r.json()["text_output"] for r in responses if r.status_code == 200}
            if expected in texts:
                served.add(process)
        return served == {"0", "1"}

    assert wait_for(both_serve, 300, 2), group.log_tail()
    cores = [p for p in psutil.Process(group.process.pid).children() if "EngineCore" in p.name()]
    assert len(cores) == 1


STREAM_SECONDS = 3.0
"""How long each stream that the drain lets finish lasts, alone: long enough that all six
have started before the signal, short enough that six together end well within the group's
20 s drain."""


def test_sigterm_drains_every_process(group: RunningServer) -> None:
    """Six streams, each on a connection of its own, sized to the host's speed and running
    (its first event came) when SIGTERM comes: each ends whole, and every process exits."""
    max_tokens = tokens_for(seconds_per_token(group.base_url), STREAM_SECONDS)
    body = {
        "text_input": "Count to fifty.",
        "return_finish_reason": True,
        "parameters": {"max_tokens": max_tokens, "ignore_eos": True},
    }
    events: list[list[dict[str, Any]]] = [[] for _ in range(6)]
    started = [threading.Event() for _ in range(6)]
    ended_at = [0.0] * 6

    def stream(index: int) -> None:
        with (
            httpx.Client(base_url=group.base_url, timeout=120) as client,
            client.stream("POST", STREAM, json=body) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data:"):
                    events[index].append(json.loads(line[5:]))
                    started[index].set()
        ended_at[index] = time.monotonic()

    threads = [threading.Thread(target=stream, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    assert all(event.wait(60) for event in started), [len(e) for e in events]
    descendants = psutil.Process(group.process.pid).children(recursive=True)
    group.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    for thread in threads:
        thread.join(timeout=120)
    assert group.process.wait(timeout=120) == 0, group.log_tail()
    assert min(ended_at) > signalled, "a stream ended before the signal"
    for stream_events in events:
        assert "error" not in stream_events[-1]
        assert stream_events[-1]["finish_reason"] == "length"
    _, alive = psutil.wait_procs(descendants, timeout=15)
    assert not alive


def test_a_stop_while_a_killed_frontend_awaits_its_restart_exits_cleanly() -> None:
    env = {"FRONTEND_PROCESSES": "2", "DRAIN_TIMEOUT_SECONDS": "5"}
    server = start_server(name="frontends-stop", env=env)
    try:
        # the server answers once one frontend serves; a frontend killed before it is ready
        # stops the group instead (a failed start is not restarted)
        assert wait_for(lambda: serving_frontends(server) == 2, 120, 0.1), server.log_tail()
        descendants = psutil.Process(server.process.pid).children(recursive=True)
        frontend_processes(server)[0].kill()
        assert wait_for(lambda: "starting it again" in server.log_path.read_text(), 30, 0.05)
        server.process.send_signal(signal.SIGTERM)  # within the restart delay (1 s)
        assert server.process.wait(timeout=120) == 0, server.log_tail()
        _, alive = psutil.wait_procs(descendants, timeout=15)
        assert not alive
    finally:
        if server.process.poll() is None:
            server.stop(signal.SIGKILL)
