"""Triton's metrics and traces against the real engine: nv_ counters moved by exactly the
requests of every protocol (one failing on each, by its reason), durations from the engine's
timeline, the histogram only where --metrics-config asks for it, OpenTelemetry spans received
by a test OTLP/HTTP receiver with the trace id of the traceparent sent, and the trace settings
over HTTP and gRPC."""

from __future__ import annotations

import re
import secrets
import signal
from collections.abc import Iterator

import httpx
import pytest
import tritonclient.grpc as triton_grpc

from tests.support.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.servers import RunningServer, start_server
from tests.support.triton_grpc import stream_results, vllm_request

MODEL = "smollm2"
PARAMETERS = {"max_tokens": 4, "ignore_eos": True, "temperature": 0}
SAMPLE = re.compile(r"^(?P<name>nv_[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
VLLM_PHASES = {"vllm.queue", "vllm.prefill", "vllm.decode"}


def nv_samples(text: str) -> dict[tuple[str, str], float]:
    """(name, labels other than model and version) -> value, for the model's nv_ series."""
    found = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and f'model="{MODEL}"' in (match["labels"] or ""):
            labels = ",".join(
                part
                for part in (match["labels"] or "").split(",")
                if not part.startswith(("model=", "version="))
            )
            found[(match["name"], labels)] = float(match["value"])
    return found


def traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01", trace_id


def one_of_each_protocol(server: RunningServer, headers: dict[str, str] | None = None) -> int:
    """A request over Triton HTTP (one response and a stream), gRPC and OpenAI (completions
    and chat); how many."""
    with httpx.Client(base_url=server.base_url, timeout=120, headers=headers) as http:
        body = {"text_input": "Say hi.", "parameters": PARAMETERS}
        assert http.post(f"/v2/models/{MODEL}/generate", json=body).status_code == 200
        assert http.post(f"/v2/models/{MODEL}/generate_stream", json=body).status_code == 200
        completion = {"model": MODEL, "prompt": "Say hi.", "max_tokens": 4, "temperature": 0}
        assert http.post("/v1/completions", json=completion).status_code == 200
        chat = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4,
            "stream": True,
        }
        assert http.post("/v1/chat/completions", json=chat).status_code == 200
    with triton_grpc.InferenceServerClient(server.grpc_url) as client:
        request = vllm_request(
            "Say hi.", "grpc-1", sampling_parameters=PARAMETERS, model_name=MODEL
        )
        results = stream_results(client, [request], headers=headers)
        assert [error for _, error in results] == [None]
    return 5


def one_failing_on_each_protocol(server: RunningServer) -> int:
    """A request over Triton HTTP, gRPC and OpenAI that the model refuses once admitted: more
    tokens than its context holds (Triton's: max_tokens; OpenAI's: the prompt); how many."""
    too_many = {"max_tokens": 100_000}
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        body = {"text_input": "x", "parameters": too_many}
        triton = http.post(f"/v2/models/{MODEL}/generate", json=body)
        assert triton.status_code == 400, triton.text
        completion = {"model": MODEL, "prompt": "hello " * 3000, "max_tokens": 4}
        openai = http.post("/v1/completions", json=completion)
        assert openai.status_code == 400 and "maximum context length" in openai.text, openai.text
    with triton_grpc.InferenceServerClient(server.grpc_url) as client:
        request = vllm_request(
            "x", "grpc-refused-1", sampling_parameters=too_many, model_name=MODEL
        )
        ((result, error),) = stream_results(client, [request])
        assert result is None and error is not None
    return 3


def test_nv_counters_move_by_exactly_the_requests_of_every_protocol(server: RunningServer) -> None:
    before = nv_samples(httpx.get(f"{server.metrics_url}/metrics").text)
    count = one_of_each_protocol(server)
    failures = one_failing_on_each_protocol(server)
    text = httpx.get(f"{server.metrics_url}/metrics").text
    after = nv_samples(text)

    def delta(name: str, labels: str = "") -> float:
        return after[(name, labels)] - before.get((name, labels), 0)

    assert delta("nv_inference_request_success") == count
    assert delta("nv_inference_count") == delta("nv_inference_exec_count") == count
    assert delta("nv_inference_request_failure", 'reason="BACKEND"') == failures
    for reason in ("REJECTED", "CANCELED", "OTHER"):
        assert delta("nv_inference_request_failure", f'reason="{reason}"') == 0
    request_us = delta("nv_inference_request_duration_us")
    queue_us = delta("nv_inference_queue_duration_us")
    infer_us = delta("nv_inference_compute_infer_duration_us")
    assert request_us > 0 and queue_us > 0 and infer_us > 0 and queue_us <= request_us
    assert delta("nv_inference_compute_input_duration_us") > 0
    phases = queue_us + infer_us + delta("nv_inference_compute_input_duration_us")
    assert phases + delta("nv_inference_compute_output_duration_us") <= request_us + 4 * count
    assert after[("nv_inference_pending_request_count", "")] == 0
    assert not any(name.startswith("nv_inference_first_response_histogram") for name, _ in after)
    assert "# TYPE nv_inference_request_success counter" in text and "nv_cpu_utilization" in text
    main_port = httpx.get(f"{server.base_url}/metrics").text
    assert (
        nv_samples(main_port)[("nv_inference_request_success", "")]
        == after[("nv_inference_request_success", "")]
    )


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as running:
        yield running


@pytest.fixture(scope="module")
def traced(receiver: OtlpReceiver) -> Iterator[RunningServer]:
    """A server that exports spans to the receiver (requests that carry a trace context only:
    rate 0, as Triton documents it) and keeps the first-response histogram."""
    server = start_server(
        "--trace-config=mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=0",
        f"--trace-config=opentelemetry,url={receiver.url}",
        "--trace-config=opentelemetry,bsp_schedule_delay=100",
        "--trace-config=opentelemetry,resource=service.name=observability-test",
        "--metrics-config=histogram_latencies=true",
        name="traced",
    )
    yield server
    code, _ = server.stop(signal.SIGTERM)
    assert code == 0, server.log_tail()


def check_request_spans(spans: list[ReceivedSpan]) -> None:
    """Triton's three spans and vLLM's phases of one request of the real engine."""
    named = {span.name: span for span in spans}
    assert {"InferRequest", MODEL, "compute"} | VLLM_PHASES <= set(named), sorted(named)
    model = named[MODEL]
    assert (
        model.attributes["triton.model_name"] == MODEL
        and model.attributes["triton.model_version"] == 1
    )
    assert model.attributes["gen_ai.latency.time_in_model_decode"] > 0
    assert named["compute"].parent_span_id == model.span_id
    assert named["vllm.decode"].parent_span_id == named["compute"].span_id
    assert named["InferRequest"].resource["service.name"] == "observability-test"


def test_spans_continue_the_traceparent_sent_on_every_protocol(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    with httpx.Client(base_url=traced.base_url, timeout=120) as http:
        for path, body in (
            (f"/v2/models/{MODEL}/generate", {"text_input": "Say hi.", "parameters": PARAMETERS}),
            (
                "/v1/chat/completions",
                {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            ),
        ):
            header, trace_id = traceparent()
            assert http.post(path, json=body, headers={"traceparent": header}).status_code == 200
            check_request_spans(receiver.wait_for(trace_id, 6))
        untraced = http.post(
            f"/v2/models/{MODEL}/generate", json={"text_input": "x", "parameters": PARAMETERS}
        )
        assert untraced.status_code == 200
    header, trace_id = traceparent()
    with triton_grpc.InferenceServerClient(traced.grpc_url) as client:
        request = vllm_request(
            "Say hi.", "traced-1", sampling_parameters=PARAMETERS, model_name=MODEL
        )
        assert [
            error for _, error in stream_results(client, [request], headers={"traceparent": header})
        ] == [None]
    spans = receiver.wait_for(trace_id, 6)
    check_request_spans(spans)
    assert {span.attributes.get("triton.request_id") for span in spans if span.name == MODEL} == {
        "traced-1"
    }
    traced_ids = {span.trace_id for span in receiver.spans if span.name == "InferRequest"}
    assert len(traced_ids) == 3  # the request without a trace context was not traced (rate 0)


def test_the_histogram_appears_when_enabled(traced: RunningServer) -> None:
    before = nv_samples(httpx.get(f"{traced.metrics_url}/metrics").text)
    with httpx.Client(base_url=traced.base_url, timeout=120) as http:
        for _ in range(2):
            body = {"text_input": "Say hi.", "parameters": PARAMETERS}
            assert http.post(f"/v2/models/{MODEL}/generate", json=body).status_code == 200
    after = nv_samples(httpx.get(f"{traced.metrics_url}/metrics").text)
    count = ("nv_inference_first_response_histogram_ms_count", "")
    assert after[count] - before.get(count, 0) == 2
    assert after[("nv_inference_first_response_histogram_ms_sum", "")] > 0
    assert ("nv_inference_first_response_histogram_ms_bucket", 'le="+Inf"') in after


def test_trace_settings_round_trip_on_both_protocols(traced: RunningServer) -> None:
    with httpx.Client(base_url=traced.base_url, timeout=30) as http:
        setting = http.get("/v2/trace/setting").json()
        started = (setting["trace_level"], setting["trace_rate"], setting["trace_mode"])
        assert started == (["TIMESTAMPS"], "0", "opentelemetry")
        refused = http.post(f"/v2/models/{MODEL}/trace/setting", json={"trace_count": "7"})
        message = "Attempting to set invalid trace setting :sample rate must be non-zero"
        assert (refused.status_code, refused.json()) == (400, {"error": message})
        change = {"trace_count": "7", "trace_rate": "2"}
        changed = http.post(f"/v2/models/{MODEL}/trace/setting", json=change).json()
        assert (changed["trace_count"], changed["trace_rate"]) == ("7", "2")
        with triton_grpc.InferenceServerClient(traced.grpc_url) as client:
            settings = client.get_trace_settings(MODEL, as_json=True)["settings"]
            assert (settings["trace_count"], settings["trace_rate"]) == (
                {"value": ["7"]},
                {"value": ["2"]},
            )
            clear = {"trace_count": None, "trace_rate": None}
            cleared = client.update_trace_settings(MODEL, clear, as_json=True)["settings"]
            assert (cleared["trace_count"], cleared["trace_rate"]) == (
                {"value": ["-1"]},
                {"value": ["0"]},
            )
        model_setting = http.get(f"/v2/models/{MODEL}/trace/setting").json()
        assert model_setting == http.get("/v2/trace/setting").json()
        refused = http.post("/v2/trace/setting", json={"trace_file": "/tmp/trace.json"})
        assert refused.status_code == 501
