"""Cache-aware routing against the real engine, with two frontend processes sharing the engine
cores of a two-instance model (`instance_group [{ kind: KIND_CPU count: 2 }]`,
INSTANCE_ROUTING cache_aware, FRONTEND_PROCESSES=2): each process keeps its own index of each
core's KV cache from the core's KV events, so a prefix's later requests go to the instance
that holds it whichever process takes them; and both processes read each core's load reports,
so a request one process sent counts in the other's choice."""

from __future__ import annotations

import json
import random
import shutil
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.paths import PROJECT_ROOT
from tests.support.servers import (
    RunningServer,
    seconds_per_token,
    start_server,
    stopping_cleanly,
    tokens_for,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("several_engines")

MODEL = "smollm2"
GENERATE = f"/v2/models/{MODEL}/generate"
STREAM = f"/v2/models/{MODEL}/generate_stream"
CONFIG = """backend: "vllm"
instance_group [ { kind: KIND_CPU count: 2 } ]
parameters: { key: "INSTANCE_ROUTING" value: { string_value: "cache_aware" } }
parameters: { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }
"""
VOCABULARY = "the a of and water stone light long old early many small great river field city"
WORDS = VOCABULARY.split()
QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
CACHE_BLOCK = 128
"""vLLM's KV block on the CPU."""


@pytest.fixture(scope="module")
def aware(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("cache-aware") / "repository"
    shutil.copytree(PROJECT_ROOT / "configs" / "model_repository", root)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    env = {"FRONTEND_PROCESSES": "2"}
    server = start_server("--model-repository", str(root), name="cache-aware", env=env)
    with stopping_cleanly(server):
        yield server


def text_about(topic: str, words: int = 340) -> str:
    """A distinct long text (some 350 tokens: two whole KV blocks and more)."""
    rng = random.Random(topic)
    return f"Notes on {topic}: " + " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def counters(base_url: str, name: str) -> dict[str, float]:
    """A `vllm:` counter of the model by instance, summed over the frontend processes."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{base_url}/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("model") == MODEL:
                found[sample.labels["instance"]] = sample.value
    return found


def client_on(base_url: str, process: int, attempts: int = 64) -> httpx.Client:
    """A client whose one kept-alive connection frontend process `process` serves."""
    for _ in range(attempts):
        client = httpx.Client(
            base_url=base_url, timeout=300, limits=httpx.Limits(max_connections=1)
        )
        answer = client.get("/v2/health/ready")
        if answer.headers.get("x-frontend-process") == str(process):
            return client
        client.close()
    raise AssertionError(f"no connection reached frontend process {process}")


def raw(prompt: str, max_tokens: int = 1, **parameters: Any) -> dict[str, Any]:
    return {"text_input": prompt, "parameters": {"max_tokens": max_tokens, **parameters}}


def instance_queried(base_url: str, before: dict[str, float]) -> str:
    """The one instance whose prefix cache was queried since `before` (waiting for it)."""
    assert wait_for(lambda: counters(base_url, QUERIES) != before, 60)
    after = counters(base_url, QUERIES)
    (instance,) = [i for i in ("0", "1") if after.get(i, 0) > before.get(i, 0)]
    return instance


def test_every_process_sends_a_prefix_to_the_instance_that_caches_it(
    aware: RunningServer,
) -> None:
    base = aware.base_url
    clients = [client_on(base, 0), client_on(base, 1)]
    for topic in ("rivers", "comets"):
        prefix = text_about(topic)
        before = counters(base, QUERIES)
        first = clients[0].post(GENERATE, json=raw(f"{prefix} Question 0: why?"))
        assert first.status_code == 200, first.text
        holder = instance_queried(base, before)
        other = "1" if holder == "0" else "0"
        for question, client in enumerate(clients * 2, start=1):
            hits, queries = counters(base, HITS), counters(base, QUERIES)
            answer = client.post(GENERATE, json=raw(f"{prefix} Question {question}: how?"))
            assert answer.status_code == 200, answer.text

            def hit(hits: dict[str, float] = hits, holder: str = holder) -> bool:
                return counters(base, HITS).get(holder, 0) >= hits.get(holder, 0) + CACHE_BLOCK

            assert wait_for(hit, 60), (topic, question)
            assert counters(base, QUERIES).get(other, 0) == queries.get(other, 0), (topic, question)
    for client in clients:
        client.close()


class ClientStream(threading.Thread):
    """One generate_stream read on a thread over a given client: status and events."""

    def __init__(self, client: httpx.Client, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.client, self.body = client, body
        self.status = 0
        self.events: list[dict[str, Any]] = []
        self.first_event = threading.Event()

    def run(self) -> None:
        with self.client.stream("POST", STREAM, json=self.body) as response:
            self.status = response.status_code
            for line in response.iter_lines():
                if line.startswith("data: "):
                    self.events.append(json.loads(line.removeprefix("data: ")))
                    self.first_event.set()


def test_a_request_one_process_sent_counts_in_the_others_choice(aware: RunningServer) -> None:
    """A long stream through one process, then one through the other: the second goes to the
    other instance, whichever process took it (twice, the processes' order swapped)."""
    base = aware.base_url
    max_tokens = tokens_for(seconds_per_token(base), 8.0, low=64)
    clients = [client_on(base, 0), client_on(base, 1)]
    for round_number, order in enumerate(((0, 1), (1, 0))):
        streams, chosen = [], []
        for process in order:
            prompt = text_about(f"round {round_number} process {process}", 150)
            body = raw(prompt, max_tokens, ignore_eos=True)
            before = counters(base, QUERIES)
            stream = ClientStream(clients[process], body)
            stream.start()
            assert stream.first_event.wait(120), f"no first event: status {stream.status}"
            chosen.append(instance_queried(base, before))
            streams.append(stream)
        assert all(stream.is_alive() for stream in streams), "a stream ended too soon"
        for stream in streams:
            stream.join(300)
        assert [stream.status for stream in streams] == [200, 200]
        assert sorted(chosen) == ["0", "1"], (order, chosen)
    for client in clients:
        client.close()
