"""A model of two CPU instances (`instance_group [{ kind: KIND_CPU count: 2 }]`) against the
real engine, on one server of its own: two engine cores, each on its own core; both serve
(cache-aware routing keeps each of 8 long prefixes on the instance whose KV cache holds it,
as the engine's KV events tell, and spreads unrelated requests by load); greedy text equal to the
one-engine session server's; a SIGKILLed instance heals while the other serves; a reload
starts two engines beside the old ones, and an unload drains and stops both.

The tests run in order on the module's server (cache-aware routing, the pin header allowed)."""

from __future__ import annotations

import random
import shutil
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.core.routing import PIN_HEADER
from app.paths import PROJECT_ROOT
from tests.support import processes
from tests.support.servers import (
    EXPLICIT_CONTROL_ENV,
    MEASURING_REQUESTS,
    RunningServer,
    seconds_per_token,
    start_server,
    stopping_cleanly,
    tokens_for,
)
from tests.support.sse import StreamReader
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("several_engines")

MODEL = "smollm2"
GENERATE = f"/v2/models/{MODEL}/generate"
STREAM = f"/v2/models/{MODEL}/generate_stream"
GREEDY = {
    "text_input": "What is Triton Inference Server?",
    "parameters": {"temperature": 0, "max_tokens": 24},
}
CONFIG = """backend: "vllm"
instance_group [ { kind: KIND_CPU count: 2 } ]
parameters: { key: "INSTANCE_ROUTING" value: { string_value: "cache_aware" } }
parameters: { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }
parameters: { key: "APPLY_CHAT_TEMPLATE" value: { string_value: "true" } }
"""
TOPICS = ["rivers", "volcanoes", "bridges", "orchards", "comets", "glaciers", "markets", "violins"]
VOCABULARY = (
    "the a of and water stone light long old early many small great river field city year "
    "people work made found under over between after before during north south east west"
)
WORDS = VOCABULARY.split()
CACHE_BLOCK = 128
"""vLLM's KV block on the CPU: the prefix cache hits whole blocks of it."""


def long_prefix(topic: str) -> str:
    """A distinct text of some 350 words about `topic` (its first words differ from the
    other prefixes')."""
    rng = random.Random(topic)
    words = [rng.choice(WORDS) for _ in range(340)]
    return f"Notes on {topic}, chapter {len(topic)}: " + " ".join(words) + "."


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("instances") / "repository"
    shutil.copytree(PROJECT_ROOT / "configs" / "model_repository", root)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    env = {
        "ALLOW_INSTANCE_PIN": "true",
        "ENGINE_RESTART_BACKOFF_SECONDS": "0.2",
        "ENGINE_RESTART_BACKOFF_MAX_SECONDS": "1",
        "DRAIN_TIMEOUT_SECONDS": "60",
        **EXPLICIT_CONTROL_ENV,
    }
    server = start_server("--model-repository", str(root), name="instances", env=env)
    with stopping_cleanly(server):
        yield server


@pytest.fixture
def http(instances: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=instances.base_url, timeout=300) as client:
        yield client


def engine_cores(server: RunningServer) -> list[psutil.Process]:
    return processes.engine_cores(server.process.pid)


def alive(process: psutil.Process) -> bool:
    try:
        running: bool = process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        return running
    except psutil.NoSuchProcess:
        return False


def core_of_instance(server: RunningServer, index: int) -> psutil.Process:
    """The engine core whose worker's threads are bound to core `index` (the instance's)."""
    for core in engine_cores(server):
        if any(worker.cpu_affinity() == [index] for worker in core.children()):
            return core
    raise AssertionError(f"no engine core bound to core {index}")


def engine_counters(http: httpx.Client, name: str) -> dict[str, float]:
    """A `vllm:` counter of the model, by instance."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("model") == MODEL:
                values[sample.labels["instance"]] = sample.value
    return values


def raw(prompt: str, max_tokens: int = 1, **parameters: Any) -> dict[str, Any]:
    """A request without the chat template: the prompt is what the engine and the key see."""
    parameters = {"max_tokens": max_tokens, "apply_chat_template": False, **parameters}
    return {"text_input": prompt, "parameters": parameters}


def pinned_stream(base_url: str, body: dict[str, Any], pin: int | None = None) -> StreamReader:
    """One SSE stream, pinned to an instance if given (not started)."""
    return StreamReader(base_url, body, {PIN_HEADER: str(pin)} if pin is not None else {}, STREAM)


def test_two_engine_cores_each_on_its_core_give_the_one_engine_servers_text(
    instances: RunningServer, http: httpx.Client, server: RunningServer
) -> None:
    assert len(engine_cores(instances)) == 2
    assert {core_of_instance(instances, i).pid for i in (0, 1)} == {
        p.pid for p in engine_cores(instances)
    }
    expected = httpx.post(f"{server.base_url}{GENERATE}", json=GREEDY, timeout=120)
    assert expected.status_code == 200, expected.text
    for index in (0, 1):
        response = http.post(GENERATE, json=GREEDY, headers={PIN_HEADER: str(index)})
        assert response.status_code == 200, response.text
        assert response.json()["text_output"] == expected.json()["text_output"]
    response = http.post(GENERATE, json=GREEDY, headers={PIN_HEADER: "2"})
    assert response.status_code == 400
    assert "x-triton-instance: model 'smollm2' has instances 0 to 1" in response.json()["error"]


def test_cache_aware_routing_keeps_each_prefix_on_the_instance_that_caches_it(
    http: httpx.Client,
) -> None:
    holders = []
    for topic in TOPICS:
        prefix = long_prefix(topic)
        before = engine_counters(http, "vllm:prefix_cache_queries_total")
        assert http.post(GENERATE, json=raw(f"{prefix} Question 1: why?")).status_code == 200

        def queried(before: dict[str, float] = before) -> bool:
            return engine_counters(http, "vllm:prefix_cache_queries_total") != before

        assert wait_for(queried)
        after = engine_counters(http, "vllm:prefix_cache_queries_total")
        (holder,) = [i for i in ("0", "1") if after.get(i, 0) > before.get(i, 0)]
        holders.append(holder)
        for question in (2, 3):
            hits = engine_counters(http, "vllm:prefix_cache_hits_total")
            queries = engine_counters(http, "vllm:prefix_cache_queries_total")
            prompt = f"{prefix} Question {question}: how?"
            assert http.post(GENERATE, json=raw(prompt)).status_code == 200

            def hit(hits: dict[str, float] = hits, holder: str = holder) -> bool:
                now = engine_counters(http, "vllm:prefix_cache_hits_total")
                return now[holder] >= hits.get(holder, 0) + 2 * CACHE_BLOCK

            assert wait_for(hit), (topic, question)
            other = "1" if holder == "0" else "0"
            now = engine_counters(http, "vllm:prefix_cache_queries_total")
            assert now.get(other, 0) == queries.get(other, 0), f"{topic} reached instance {other}"
    assert set(holders) == {"0", "1"}, holders


SPREAD_SECONDS = 10.0
"""How long each of the eight unrelated streams lasts, alone: the first is still running when
the last starts."""


def test_least_loaded_spreads_unrelated_requests_evenly(
    instances: RunningServer, http: httpx.Client
) -> None:
    """Eight streams, each started once the one before has its first event and each lasting
    (sized to the host's speed) until all have started: least-loaded routing sees the load of
    every one before it."""
    counted = lambda: engine_counters(http, "vllm:e2e_request_latency_seconds_count")  # noqa: E731
    unmeasured = counted()
    max_tokens = tokens_for(seconds_per_token(instances.base_url), SPREAD_SECONDS, low=128)
    # the measuring requests are counted first (a count may lag its answer)
    measured = lambda: sum(counted().values()) - sum(unmeasured.values())  # noqa: E731
    assert wait_for(lambda: measured() == MEASURING_REQUESTS, 30)
    before = counted()
    streams = [
        pinned_stream(instances.base_url, raw(f"Count to {n}.", max_tokens, ignore_eos=True))
        for n in range(8)
    ]
    for stream in streams:
        stream.start()
        assert stream.first_event.wait(120), f"no first event: status {stream.status}"
    assert all(stream.is_alive() for stream in streams), "a stream ended before the last began"
    for stream in streams:
        stream.join(300)
    assert [s.status for s in streams] == [200] * 8
    assert not any("error" in event for s in streams for event in s.events)
    assert wait_for(lambda: sum(counted().values()) - sum(before.values()) == 8, 30)
    after = counted()
    spread = [after[i] - before.get(i, 0) for i in ("0", "1")]
    assert min(spread) >= 3, spread


def test_a_killed_instance_heals_while_the_other_serves(
    instances: RunningServer, http: httpx.Client
) -> None:
    body = {**raw("Tell me about the sea.", 48, ignore_eos=True), "return_num_output_tokens": True}
    streams = [pinned_stream(instances.base_url, body, pin) for pin in (0, 1, 1)]
    for stream in streams:
        stream.start()
    assert wait_for(lambda: all(s.events for s in streams), 120)
    killed = core_of_instance(instances, 1)
    killed.send_signal(signal.SIGKILL)
    assert wait_for(lambda: not alive(killed), 10)
    healing = time.monotonic()
    served = 0
    while len(engine_cores(instances)) < 2 or served < 4:
        assert time.monotonic() - healing < 180, "instance 1 did not come back"
        assert http.get("/v2/health/ready").status_code == 200, "the model went unready"
        response = http.post(GENERATE, json=raw(f"Say {served}.", 4))
        assert response.status_code == 200, response.text
        served += 1
    for stream in streams:
        stream.join(180)
    assert [s.status for s in streams] == [200] * 3
    for stream in streams:  # those on the killed instance resumed on its replacement
        assert "error" not in stream.events[-1], stream.events[-1]
        assert sum(event["num_output_tokens"] for event in stream.events) == 48
    restarts = 'server_engine_restarts_total{model="smollm2",version="1"} 1.0'
    assert wait_for(lambda: restarts in http.get("/metrics").text, 30)
    assert core_of_instance(instances, 1).pid != killed.pid


def test_a_reload_starts_both_engines_beside_the_old_and_an_unload_drains_both(
    instances: RunningServer, http: httpx.Client
) -> None:
    old = engine_cores(instances)
    assert len(old) == 2
    assert http.post(f"/v2/repository/models/{MODEL}/load").status_code == 200
    assert wait_for(lambda: not any(alive(p) for p in old), 30)
    new = engine_cores(instances)
    assert len(new) == 2 and not {p.pid for p in new} & {p.pid for p in old}
    streams = [
        pinned_stream(instances.base_url, raw("Name the planets.", 32, ignore_eos=True), pin)
        for pin in (0, 1)
    ]
    for stream in streams:
        stream.start()
    assert wait_for(lambda: all(s.events for s in streams), 120)
    assert http.post(f"/v2/repository/models/{MODEL}/unload").status_code == 200
    for stream in streams:
        stream.join(60)
    assert [s.status for s in streams] == [200, 200]
    assert all("error" not in s.events[-1] for s in streams), [s.events[-1] for s in streams]
    assert wait_for(lambda: not any(alive(p) for p in new), 30)
    children = psutil.Process(instances.process.pid).children(recursive=True)
    assert not [p for p in children if "VLLM" in p.name() and alive(p)]
