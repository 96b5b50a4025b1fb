"""vllm: metrics fed by the real engine, vLLM's /health and /ping on it, and a dead engine
turning its model unready."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.asgi import free_port
from tests.support.servers import RunningServer, start_server

GENERATE = "/v2/models/smollm2/generate"
LABELS = {"model": "smollm2", "version": "1"}


def scrape(http: httpx.Client, url: str = "/metrics") -> dict[str, float]:
    """Sample name -> value for the smollm2 series (histogram buckets keyed with their `le`):
    the model's, and its engine's (`vllm:`, of its only instance, "0")."""
    values = {}
    for family in text_string_to_metric_families(http.get(url).text):
        for sample in family.samples:
            labels = dict(sample.labels)
            le = labels.pop("le", None)
            instance = labels.pop("instance", None)
            engine = sample.name.startswith("vllm:")
            if labels == LABELS and (instance == "0" if engine else instance is None):
                values[sample.name + (f"[{le}]" if le else "")] = sample.value
    return values


def test_vllm_metrics_count_what_requests_used(http: httpx.Client) -> None:
    before = scrape(http)
    outputs = {"return_num_input_tokens": True, "return_num_output_tokens": True}
    first = http.post(
        GENERATE,
        json={
            "text_input": "Count to three.",
            "parameters": {"max_tokens": 6, "ignore_eos": True},
            **outputs,
        },
    ).json()
    second = http.post(
        GENERATE,
        json={
            "text_input": "Name a fruit.",
            "parameters": {"max_tokens": 4, "ignore_eos": True, "n": 2, "temperature": 1},
            **outputs,
        },
    ).json()
    time.sleep(0.5)
    after = scrape(http)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    # vLLM runs n=2 as two sequences, each counting the prompt once
    prompt_tokens = first["num_input_tokens"] + 2 * second["num_input_tokens"]
    assert delta("vllm:prompt_tokens_total") == prompt_tokens
    assert delta("vllm:request_prompt_tokens_sum") == prompt_tokens
    assert delta("vllm:generation_tokens_total") == 6 + sum(second["num_output_tokens"]) == 14
    # n=2 is one request for the client but two sequences in the engine
    assert delta("vllm:e2e_request_latency_seconds_count") == 3
    assert delta("vllm:request_generation_tokens_sum") == 14
    assert delta("vllm:request_params_n_count") == 2 and delta("vllm:request_params_n_sum") == 3
    assert delta("vllm:time_to_first_token_seconds_count") == 3
    assert delta("vllm:time_per_output_token_seconds_count") == 14 - 3
    assert delta("vllm:e2e_request_latency_seconds_bucket[+Inf]") == 3
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    assert 0 <= after["vllm:gpu_cache_usage_perc"] <= 1
    assert (
        "vllm:request_prompt_tokens_bucket[2000.0]" in after
    )  # 1-2-5 buckets up to max_model_len 2048
    assert "vllm:time_to_first_token_seconds_bucket[0.001]" in after  # the backend's buckets
    text = http.get("/metrics").text  # the engine's series: per instance, "0" for the only one
    assert 'vllm:generation_tokens_total{instance="0",model="smollm2",version="1"}' in text
    assert 'vllm:prefix_cache_queries_total{instance="0",model="smollm2",version="1"}' in text


def test_http_metrics_on_the_main_port(http: httpx.Client) -> None:
    http.post("/v2/models/not-a-model-xyz/generate", json={"text_input": "x"})
    text = http.get("/metrics").text
    assert 'handler="/v2/models/{model_name}/generate"' in text
    assert "not-a-model-xyz" not in text


def test_vllms_health_and_ping_answer_as_vllm_serve_does(http: httpx.Client) -> None:
    """GET /health, GET and POST /ping: 200 with an empty body while the engine serves; /health
    takes no POST (vLLM's routes)."""
    for method, path in (("GET", "/health"), ("GET", "/ping"), ("POST", "/ping")):
        response = http.request(method, path)
        assert (response.status_code, response.content) == (200, b""), (method, path)
    assert http.post("/health").status_code == 405


@pytest.fixture(scope="module")
def doomed() -> Iterator[tuple[RunningServer, int]]:
    """A server of its own, whose engine the test kills; metrics also on a separate port. Its
    requests do not wait for a new engine (they would resume there: test_migration_real_engine).
    It sends no health probe: only the engine's death, seen at once, can make it unready."""
    metrics_port = free_port()
    env = {
        "METRICS_PORT": str(metrics_port),
        "ENGINE_MIGRATE_REQUESTS": "false",
        "ENGINE_PROBE_INTERVAL_SECONDS": "0",
    }
    server = start_server(name="doomed", env=env)
    yield server, metrics_port
    _code, alive = server.stop(signal.SIGTERM)
    for process in alive:
        process.kill()
    assert not alive


def engine_core(server: RunningServer) -> psutil.Process:
    return next(
        p for p in psutil.Process(server.process.pid).children() if "EngineCore" in p.name()
    )


def test_separate_metrics_port(doomed: tuple[RunningServer, int]) -> None:
    server, metrics_port = doomed
    with httpx.Client(timeout=30) as client:
        client.post(
            server.base_url + GENERATE, json={"text_input": "Hi", "parameters": {"max_tokens": 2}}
        )
        values = scrape(client, f"http://127.0.0.1:{metrics_port}/metrics")
    assert values["vllm:generation_tokens_total"] >= 2


def test_killed_engine_makes_the_model_unready_fast(doomed: tuple[RunningServer, int]) -> None:
    server, _ = doomed
    url = server.base_url
    stream_events: list[dict[str, Any]] = []

    def long_stream() -> None:
        body = {
            "text_input": "Tell a long story.",
            "parameters": {"max_tokens": 1500, "ignore_eos": True},
        }
        with httpx.stream(
            "POST", url + "/v2/models/smollm2/generate_stream", json=body, timeout=60
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):  # each event seen by the test as it arrives
                    stream_events.append(json.loads(line.removeprefix("data: ")))  # noqa: PERF401

    reader = threading.Thread(target=long_stream)
    reader.start()
    while not stream_events:
        time.sleep(0.05)
    engine_core(server).kill()
    killed_at = time.monotonic()
    while httpx.get(url + "/v2/health/ready", timeout=30).status_code != 503:
        assert time.monotonic() - killed_at < 60, "model still ready 60 s after its engine died"
        time.sleep(0.1)
    assert httpx.get(url + "/v2/models/smollm2/ready", timeout=30).status_code == 503
    response = httpx.post(url + GENERATE, json={"text_input": "x"}, timeout=30)
    assert response.status_code == 503
    assert response.json() == {"error": "Model is unavailable due to unhealthy vLLM engine"}
    assert httpx.get(url + "/v2/health/live", timeout=30).status_code == 200
    reader.join(timeout=120)
    assert not reader.is_alive(), "the open stream hung after the engine died"
    assert stream_events[-1] == {"error": "Model is unavailable due to unhealthy vLLM engine"}
