"""Triton's nv_ metrics with the engine double: names, types, labels and HELP texts as Triton
writes them, counters moved by every protocol, failures by reason, the latency options of
--metrics-config, the pending gauge, Triton's metrics port and --allow-metrics."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.core.timing import EngineTimeline, RequestTiming
from app.errors import (
    EngineUnhealthyError,
    InvalidRequestError,
    ModelUnavailableError,
    OverloadedError,
    RequestTimeoutError,
)
from app.main import create_app
from app.observability.statistics import failure_reason
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.asgi import call_and_disconnect, free_port, serve_in_thread

MS = 1_000_000
SERIES = re.compile(r"^(?P<name>[a-z_:]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample line of an exposition: (name, labels) -> value."""
    found = {}
    for line in text.splitlines():
        match = SERIES.match(line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
            found[(match["name"], labels)] = float(match["value"])
    return found


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset({"model": "fake", "version": "1", **labels}.items()))]


def test_every_triton_family_has_tritons_name_type_and_help_before_any_request(
    client: TestClient,
) -> None:
    text = client.get("/metrics").text
    assert (
        "# HELP nv_inference_request_success "
        "Number of successful inference requests, all batch sizes" in text
    )
    assert "# TYPE nv_inference_request_success counter" in text
    assert (
        "# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes"
        in text
    )
    assert "# TYPE nv_inference_pending_request_count gauge" in text
    assert (
        "# HELP nv_inference_queue_duration_us "
        "Cumulative inference queuing duration in microseconds "
        "(includes cached requests)" in text
    )
    assert "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]" in text
    assert (
        "nv_inference_request_success_total" not in text and "nv_inference_count_total" not in text
    )
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        assert value(text, "nv_inference_request_failure", reason=reason) == 0
    for name in (
        "nv_inference_request_success",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_inference_pending_request_count",
    ):
        assert value(text, name) == 0, name
    assert "nv_inference_first_response_histogram_ms" not in text and "_summary_us" not in text
    assert "nv_gpu_utilization" not in text  # no GPU here: no GPU series
    assert samples(text)[("nv_cpu_memory_total_bytes", frozenset())] > 0


def test_counters_move_by_exactly_the_requests_of_every_protocol(client: TestClient) -> None:
    assert (
        client.post(
            "/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 2}
        ).status_code
        == 200
    )
    stream = client.post(
        "/v2/models/fake/generate_stream", json={"text_input": "x", "max_tokens": 3}
    )
    assert stream.status_code == 200
    completion = client.post(
        "/v1/completions", json={"model": "fake", "prompt": "x", "max_tokens": 2}
    )
    assert completion.status_code == 200, completion.text
    refused = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 999999}
    )
    assert refused.status_code == 400
    text = client.get("/metrics").text
    assert value(text, "nv_inference_request_success") == 3
    assert value(text, "nv_inference_count") == value(text, "nv_inference_exec_count") == 3
    assert value(text, "nv_inference_request_failure", reason="BACKEND") == 1
    request_us, queue_us = (
        value(text, "nv_inference_request_duration_us"),
        value(text, "nv_inference_queue_duration_us"),
    )
    assert request_us > 0 and 0 <= queue_us <= request_us
    assert value(text, "nv_inference_compute_infer_duration_us") > 0
    phases = sum(
        value(text, f"nv_inference_{phase}_duration_us")
        for phase in ("queue", "compute_input", "compute_infer", "compute_output")
    )
    assert phases <= request_us + 4  # each phase truncated to whole microseconds


def test_failures_are_counted_by_reason(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(fail_after=1, fail_with=EngineUnhealthyError()))
    client.post("/v2/models/fake/generate_stream", json={"text_input": "x", "max_tokens": 4})
    text = client.get("/metrics").text
    assert value(text, "nv_inference_request_failure", reason="BACKEND") == 1
    assert value(text, "nv_inference_request_success") == 0


def test_a_request_turned_away_is_rejected_and_one_the_client_left_is_canceled(
    make_client: Callable[..., TestClient],
) -> None:
    engine = FakeEngine(step_delay=0.05)
    client = make_client(engine, max_pending_requests=1)
    app = client.app

    async def scenario() -> None:
        body = b'{"text_input": "x", "max_tokens": 50}'
        left = asyncio.create_task(
            call_and_disconnect(app, "POST", "/v2/models/fake/generate_stream", body=body)
        )
        await asyncio.sleep(0.1)
        turned_away = await call_and_disconnect(
            app, "POST", "/v2/models/fake/generate", body=body, seconds=0.05
        )
        assert turned_away[0]["status"] == 503
        await left

    asyncio.run(scenario())
    text = client.get("/metrics").text
    assert value(text, "nv_inference_request_failure", reason="REJECTED") == 1
    assert value(text, "nv_inference_request_failure", reason="CANCELED") == 1
    assert value(text, "nv_inference_request_success") == 0


@pytest.mark.parametrize(
    ("error", "admitted", "reason"),
    [
        (OverloadedError("busy"), False, "REJECTED"),
        (RequestTimeoutError("late"), True, "REJECTED"),
        (EngineUnhealthyError(), True, "BACKEND"),
        (InvalidRequestError("n: too large"), True, "BACKEND"),
        (ModelUnavailableError("draining"), False, "OTHER"),
        (RuntimeError("bug"), True, "OTHER"),
    ],
)
def test_failure_reasons(error: Exception, admitted: bool, reason: str) -> None:
    timing = RequestTiming("m", "1")
    if admitted:
        timing.admitted()
    timing.fail(error)
    assert failure_reason(timing) == reason


def test_a_cancelled_request_is_canceled_whatever_ended_it() -> None:
    timing = RequestTiming("m", "1", cancelled=True, failed=True)
    assert failure_reason(timing) == "CANCELED"


def test_the_engines_timeline_splits_the_request_into_triton_phases() -> None:
    timing = RequestTiming("m", "1", started_ns=1_000 * MS)
    timing.engine_reported(
        EngineTimeline(1_002 * MS, 1_003 * MS, 1_010 * MS, 1_020 * MS, 1_050 * MS)
    )
    timing.finished_ns = 1_060 * MS
    assert (timing.input_ns, timing.queue_ns, timing.infer_ns, timing.output_ns) == (
        2 * MS,
        8 * MS,
        40 * MS,
        10 * MS,
    )
    assert timing.input_ns + timing.queue_ns + timing.infer_ns + timing.output_ns == timing.total_ns


def test_engine_marks_outside_the_request_are_clamped_into_it() -> None:
    timing = RequestTiming("m", "1", started_ns=1_000 * MS)
    timing.engine_reported(EngineTimeline(990 * MS, 995 * MS, 1_005 * MS, 1_006 * MS, 1_100 * MS))
    timing.finished_ns = 1_050 * MS
    assert timing.input_ns == 0 and timing.queue_ns == 5 * MS and timing.output_ns == 0
    assert timing.infer_ns == 45 * MS and timing.queue_ns <= timing.total_ns


def test_several_engine_requests_make_one_timeline() -> None:
    first = EngineTimeline(10, 11, 20, 30, 40)
    second = EngineTimeline(12, 0, 15, 35, 60)
    assert first.merged(second) == EngineTimeline(10, 11, 15, 30, 60)


def test_the_histogram_and_summaries_appear_only_when_enabled(
    make_client: Callable[..., TestClient],
) -> None:
    options = [
        "histogram_latencies=true",
        "summary_latencies=true",
        "summary_quantiles=0.5:0.05,0.99:0.001",
    ]
    client = make_client(FakeEngine(), metrics_config=options)
    for _ in range(2):
        client.post("/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 2})
    text = client.get("/metrics").text
    assert "# TYPE nv_inference_first_response_histogram_ms histogram" in text
    assert (
        "# HELP nv_inference_first_response_histogram_ms "
        "Duration from request to first response in milliseconds" in text
    )
    # Triton's bucket bounds; how many requests fall under 100 ms depends on the host's speed
    assert 0 <= value(text, "nv_inference_first_response_histogram_ms_bucket", le="100.0") <= 2
    assert value(text, "nv_inference_first_response_histogram_ms_bucket", le="+Inf") == 2
    assert value(text, "nv_inference_first_response_histogram_ms_count") == 2
    assert "# TYPE nv_inference_queue_summary_us summary" in text
    assert value(text, "nv_inference_request_summary_us_count") == 2
    assert value(text, "nv_inference_request_summary_us", quantile="0.99") > 0
    assert (
        "nv_inference_request_summary_us",
        frozenset({"model": "fake", "version": "1", "quantile": "0.9"}.items()),
    ) not in samples(text)


def test_counter_latencies_can_be_turned_off(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), metrics_config=["counter_latencies=false"])
    client.post("/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 2})
    text = client.get("/metrics").text
    assert (
        "nv_inference_request_duration_us" not in text
        and "nv_inference_queue_duration_us" not in text
    )
    assert value(text, "nv_inference_request_success") == 1


def test_pending_counts_the_admitted_requests_until_they_end(repository: Path) -> None:
    app = create_app(
        Settings(model_repository=[repository]),
        engine_factory=lambda spec: FakeEngine(step_delay=0.1),
    )
    with serve_in_thread(app) as url:
        started = threading.Event()

        def stream() -> None:
            with httpx.stream(
                "POST",
                f"{url}/v2/models/fake/generate_stream",
                json={"text_input": "x", "max_tokens": 20},
                timeout=30,
            ) as response:
                for _ in response.iter_lines():
                    started.set()

        thread = threading.Thread(target=stream)
        thread.start()
        assert started.wait(10)
        assert value(httpx.get(f"{url}/metrics").text, "nv_inference_pending_request_count") == 1
        thread.join(30)
        assert value(httpx.get(f"{url}/metrics").text, "nv_inference_pending_request_count") == 0


def test_the_metrics_port_serves_the_same_metrics(repository: Path) -> None:
    port = free_port()
    app = create_app(
        Settings(model_repository=[repository], metrics_port=port, metrics_address="127.0.0.1"),
        engine_factory=lambda spec: FakeEngine(),
    )
    with TestClient(app) as client:
        client.post("/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 2})
        response = httpx.get(f"http://127.0.0.1:{port}/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith(
            "text/plain"
        )
        assert value(response.text, "nv_inference_request_success") == 1
        assert httpx.get(f"http://127.0.0.1:{port}/other").status_code == 404
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_allow_metrics_false_serves_no_metrics(repository: Path) -> None:
    port = free_port()
    settings = Settings(model_repository=[repository], metrics_port=port, allow_metrics=False)
    with TestClient(create_app(settings, engine_factory=lambda spec: FakeEngine())) as client:
        assert client.get("/metrics").status_code == 404
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
