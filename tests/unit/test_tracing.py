"""OpenTelemetry traces with the engine double, received by a test OTLP/HTTP receiver: Triton's
spans for HTTP, gRPC and OpenAI requests, an incoming `traceparent` continued, sampling by
the trace settings, and vLLM's phases from the engine's timeline."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as triton_grpc
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.core.timing import EngineTimeline, RequestTiming
from app.http.trace_context import trace_headers
from app.main import create_app
from app.observability.tracing import PROPAGATOR, emit_spans
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.triton_grpc import serve_grpc_app, stream_results, vllm_request

MS = 1_000_000


def traceparent() -> tuple[str, str, str]:
    """A new W3C traceparent header, its trace id and its span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def trace_config(receiver: OtlpReceiver, *extra: str) -> list[str]:
    return [
        "mode=opentelemetry",
        "level=TIMESTAMPS",
        f"opentelemetry,url={receiver.url}",
        "opentelemetry,bsp_schedule_delay=50",
        "opentelemetry,resource=service.name=tests",
        *extra,
    ]


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as running:
        yield running


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {span.name: span for span in spans}


def check_tritons_spans(
    spans: list[ReceivedSpan], parent_span_id: str, model: str = "fake"
) -> dict[str, ReceivedSpan]:
    """InferRequest under the caller's span, the model's span under it, compute under that."""
    named = by_name(spans)
    root, model_span, compute = named["InferRequest"], named[model], named["compute"]
    assert root.parent_span_id == parent_span_id
    assert (
        model_span.parent_span_id == root.span_id and compute.parent_span_id == model_span.span_id
    )
    assert (
        model_span.attributes["triton.model_name"] == model
        and model_span.attributes["triton.model_version"] == 1
    )
    assert model_span.events == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert compute.events == [
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
    ]
    assert root.start_ns <= model_span.start_ns <= compute.start_ns <= compute.end_ns <= root.end_ns
    assert root.resource["service.name"] == "tests"
    return named


def test_an_http_request_continues_its_callers_trace(
    repository: Path, receiver: OtlpReceiver
) -> None:
    settings = Settings(model_repository=[repository], trace_config=trace_config(receiver))
    header, trace_id, span_id = traceparent()
    with TestClient(create_app(settings, engine_factory=lambda spec: FakeEngine())) as client:
        response = client.post(
            "/v2/models/fake/generate",
            json={"text_input": "x", "max_tokens": 2},
            headers={"traceparent": header},
        )
        assert response.status_code == 200
        spans = receiver.wait_for(trace_id, 3)
    named = check_tritons_spans(spans, span_id)
    assert named["fake"].status_code == 0  # unset: a success


def test_openai_and_failing_requests_are_traced(repository: Path, receiver: OtlpReceiver) -> None:
    settings = Settings(model_repository=[repository], trace_config=trace_config(receiver))
    header, trace_id, span_id = traceparent()
    failing, failing_trace, _ = traceparent()
    with TestClient(create_app(settings, engine_factory=lambda spec: FakeEngine())) as client:
        body = {"model": "fake", "prompt": "x", "max_tokens": 2, "stream": True}
        assert (
            client.post("/v1/completions", json=body, headers={"traceparent": header}).status_code
            == 200
        )
        refused = client.post(
            "/v2/models/fake/generate",
            json={"text_input": "x", "max_tokens": 10**6},
            headers={"traceparent": failing},
        )
        assert refused.status_code == 400
        check_tritons_spans(receiver.wait_for(trace_id, 3), span_id)
        failed = by_name(receiver.wait_for(failing_trace, 3))
    assert failed["fake"].status_code == 2 and failed["InferRequest"].status_code == 2  # ERROR


def test_a_grpc_stream_continues_the_trace_of_its_call(
    repository: Path, receiver: OtlpReceiver
) -> None:
    header, trace_id, span_id = traceparent()
    with (
        serve_grpc_app(
            repository, lambda spec: FakeEngine(), trace_config=trace_config(receiver)
        ) as app,
        triton_grpc.InferenceServerClient(app.grpc_url) as client,
    ):
        requests = [
            vllm_request("x", str(i), sampling_parameters={"max_tokens": "2"}) for i in range(2)
        ]
        results = stream_results(client, requests, headers={"traceparent": header})
        assert all(error is None for _, error in results)
        spans = receiver.wait_for(trace_id, 6)
    roots = [span for span in spans if span.name == "InferRequest"]
    assert len(roots) == 2 and all(root.parent_span_id == span_id for root in roots)
    assert {span.attributes.get("triton.request_id") for span in spans if span.name == "fake"} == {
        "0",
        "1",
    }


def test_requests_without_a_trace_context_are_sampled_by_rate_and_count(
    repository: Path, receiver: OtlpReceiver
) -> None:
    settings = Settings(
        model_repository=[repository], trace_config=trace_config(receiver, "rate=2", "count=1")
    )
    with TestClient(create_app(settings, engine_factory=lambda spec: FakeEngine())) as client:
        for _ in range(6):
            client.post("/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 1})
        assert client.get("/v2/trace/setting").json()["trace_count"] == "0"
    roots = [span for span in receiver.spans if span.name == "InferRequest"]
    assert len(roots) == 1 and roots[0].parent_span_id == ""


def test_level_off_traces_nothing_even_with_a_trace_context(
    repository: Path, receiver: OtlpReceiver
) -> None:
    config = [option for option in trace_config(receiver) if option != "level=TIMESTAMPS"]
    header, trace_id, _ = traceparent()
    with TestClient(
        create_app(
            Settings(model_repository=[repository], trace_config=config),
            engine_factory=lambda spec: FakeEngine(),
        )
    ) as client:
        client.post(
            "/v2/models/fake/generate",
            json={"text_input": "x", "max_tokens": 1},
            headers={"traceparent": header},
        )
        client.post("/v2/trace/setting", json={"trace_level": ["TIMESTAMPS"]})
        header2, trace_id2, _ = traceparent()
        client.post(
            "/v2/models/fake/generate",
            json={"text_input": "x", "max_tokens": 1},
            headers={"traceparent": header2},
        )
        receiver.wait_for(trace_id2, 3)
    assert receiver.of_trace(trace_id) == []


def test_a_collector_that_is_down_fails_no_request(repository: Path) -> None:
    config = [
        "mode=opentelemetry",
        "level=TIMESTAMPS",
        "rate=1",
        "opentelemetry,url=http://127.0.0.1:9/v1/traces",
        "opentelemetry,bsp_schedule_delay=10",
    ]
    with TestClient(
        create_app(
            Settings(model_repository=[repository], trace_config=config),
            engine_factory=lambda spec: FakeEngine(),
        )
    ) as client:
        for _ in range(3):
            assert (
                client.post(
                    "/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 1}
                ).status_code
                == 200
            )


def parent_id(span: ReadableSpan) -> int:
    assert span.parent is not None, span.name
    return span.parent.span_id


def start_of(span: ReadableSpan) -> int:
    assert span.start_time is not None, span.name
    return span.start_time


def end_of(span: ReadableSpan) -> int:
    assert span.end_time is not None, span.name
    return span.end_time


def test_the_engines_timeline_becomes_tritons_marks_and_vllms_phases() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    header, trace_id, span_id = traceparent()
    timing = RequestTiming(
        "m", "2", "req-7", started_ns=1_000 * MS, trace_context={"traceparent": header}
    )
    timing.engine_reported(
        EngineTimeline(1_002 * MS, 1_003 * MS, 1_010 * MS, 1_020 * MS, 1_050 * MS)
    )
    timing.finished_ns, timing.complete = 1_060 * MS, True
    emit_spans(provider.get_tracer("t"), timing, PROPAGATOR.extract(timing.trace_context), 1)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {
        "InferRequest",
        "m",
        "compute",
        "vllm.queue",
        "vllm.prefill",
        "vllm.decode",
    }
    assert all(format(span.context.trace_id, "032x") == trace_id for span in spans.values())
    assert format(parent_id(spans["InferRequest"]), "016x") == span_id
    assert parent_id(spans["vllm.queue"]) == spans["m"].context.span_id
    assert parent_id(spans["vllm.prefill"]) == spans["compute"].context.span_id
    offset = start_of(spans["InferRequest"]) - 1_000 * MS
    events = {event.name: event.timestamp - offset for event in spans["compute"].events}
    assert events == {
        "COMPUTE_START": 1_010 * MS,
        "COMPUTE_INPUT_END": 1_010 * MS,
        "COMPUTE_OUTPUT_START": 1_050 * MS,
        "COMPUTE_END": 1_060 * MS,
    }
    assert spans["m"].events[1].timestamp - offset == 1_002 * MS  # QUEUE_START: the engine took it
    assert (start_of(spans["vllm.decode"]) - offset, end_of(spans["vllm.decode"]) - offset) == (
        1_020 * MS,
        1_050 * MS,
    )
    attributes = spans["m"].attributes
    assert attributes is not None
    assert (attributes["triton.model_version"], attributes["triton.request_id"]) == (2, "req-7")
    assert attributes["gen_ai.latency.time_in_queue"] == pytest.approx(0.007)
    assert attributes["gen_ai.latency.time_in_model_decode"] == pytest.approx(0.030)


def test_trace_headers_are_read_from_http_requests() -> None:
    assert trace_headers([(b"traceparent", b"00-ab-cd-01"), (b"TraceState", b"k=v")]) == {
        "traceparent": "00-ab-cd-01",
        "tracestate": "k=v",
    }
    assert trace_headers([(b"tracestate", b"k=v")]) is None
    assert trace_headers([(b"traceparent", b"x" * 4096)]) is None
