"""Triton's OpenTelemetry traces (`--trace-config mode=opentelemetry`): for each sampled request,
Triton's spans (`InferRequest`; the model's span with `triton.model_name` and
`triton.model_version`; `compute`) with Triton's event names, and vLLM's own timing (queue,
prefill, decode spans; vLLM's `gen_ai.latency.*` attributes), exported over OTLP/HTTP by the
OpenTelemetry SDK. A request that carries a W3C `traceparent` continues that trace (and is
always traced, as in Triton, unless the level is OFF). Spans are built when the request ends,
from its timing: nothing is done per token."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.core.timing import RequestTiming, clamp
from app.observability.statistics import failure_reason
from app.observability.trace_config import DEFAULT_SERVICE_NAME, OPENTELEMETRY_MODE, TraceConfig
from app.observability.trace_settings import TraceSettings

logger = logging.getLogger(__name__)

TRACER_NAME = "triton-vllm-generate"
PROPAGATOR = TraceContextTextMapPropagator()
SECONDS = 1e9
SHUTDOWN_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Marks:
    """Triton's timestamps of one request, in monotonic nanoseconds."""

    request_start: int
    queue_start: int
    compute_start: int
    compute_input_end: int
    compute_output_start: int
    compute_end: int


def marks_of(timing: RequestTiming) -> Marks:
    """The timestamps, from the engine's timeline where there is one: queued once the engine
    took it, computing from its first schedule to its last token (then the output)."""
    start, end = timing.started_ns, timing.end_ns
    engine = timing.engine_marks
    if engine is not None:
        taken, scheduled, last_token = engine
        return Marks(start, taken, scheduled, scheduled, last_token, end)
    compute_start = timing.admitted_ns or start
    input_end = max(compute_start, timing.first_chunk_ns or compute_start)
    return Marks(start, start, compute_start, input_end, max(input_end, end - timing.held_ns), end)


class RequestTracer:
    """A `StatisticsRecorder` that exports the spans of each sampled request."""

    def __init__(self, settings: TraceSettings, config: TraceConfig) -> None:
        self.settings = settings
        self._provider: TracerProvider | None = None
        self._tracer: Tracer | None = None
        self._numbers = itertools.count(1)
        if config.mode == OPENTELEMETRY_MODE:
            self._provider = tracer_provider(config)
            self._tracer = self._provider.get_tracer(TRACER_NAME)

    def record_request(self, timing: RequestTiming) -> None:
        if self._tracer is None:
            return
        parent = PROPAGATOR.extract(timing.trace_context or {})
        forced = trace.get_current_span(parent).get_span_context().is_valid
        if self.settings.get(timing.model).sample(forced):
            emit_spans(self._tracer, timing, parent, next(self._numbers))

    def shutdown(self) -> None:
        """Export what is still queued, then stop; a collector that does not answer holds the
        server's exit for at most SHUTDOWN_SECONDS (its spans are lost)."""
        if self._provider is None:
            return
        stopping = threading.Thread(
            target=self._provider.shutdown, name="trace-export", daemon=True
        )
        stopping.start()
        stopping.join(SHUTDOWN_SECONDS)
        if stopping.is_alive():
            logger.warning("Traces not yet exported were dropped: the collector did not answer")


def tracer_provider(config: TraceConfig) -> TracerProvider:
    """The SDK's provider: OTLP/HTTP to `url` through a batch span processor with the `bsp_*`
    settings, the resource from OTEL_RESOURCE_ATTRIBUTES and `resource=k=v` (service.name
    triton-inference-server unless either names one)."""
    url = config.url if "://" in config.url else f"http://{config.url}"
    processor = BatchSpanProcessor(
        OTLPSpanExporter(endpoint=url),
        max_queue_size=config.bsp("bsp_max_queue_size"),
        schedule_delay_millis=config.bsp("bsp_schedule_delay"),
        max_export_batch_size=config.bsp("bsp_max_export_batch_size"),
    )
    detected = Resource.create()
    attributes: dict[str, str] = {}
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        attributes[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    attributes.update(config.resource())
    provider = TracerProvider(resource=detected.merge(Resource(attributes)))
    provider.add_span_processor(processor)
    logger.info("Exporting traces over OTLP/HTTP to %s", url)
    return provider


def emit_spans(tracer: Tracer, timing: RequestTiming, parent: Context, number: int) -> None:
    """Triton's three spans of one request (and vLLM's own phases), ended at their times."""
    offset = time.time_ns() - time.monotonic_ns()
    marks = marks_of(timing)

    def at(monotonic_ns: int) -> int:
        return monotonic_ns + offset

    root = tracer.start_span(
        "InferRequest", parent, SpanKind.SERVER, start_time=at(marks.request_start)
    )
    model = tracer.start_span(
        timing.model,
        trace.set_span_in_context(root),
        SpanKind.SERVER,
        attributes=model_attributes(timing, number),
        start_time=at(marks.request_start),
    )
    model.add_event("REQUEST_START", timestamp=at(marks.request_start))
    model.add_event("QUEUE_START", timestamp=at(marks.queue_start))
    model_context = trace.set_span_in_context(model)
    compute = tracer.start_span(
        "compute", model_context, SpanKind.SERVER, start_time=at(marks.compute_start)
    )
    for name, mark in (
        ("COMPUTE_START", marks.compute_start),
        ("COMPUTE_INPUT_END", marks.compute_input_end),
        ("COMPUTE_OUTPUT_START", marks.compute_output_start),
        ("COMPUTE_END", marks.compute_end),
    ):
        compute.add_event(name, timestamp=at(mark))
    for name, context, begin, end in engine_phases(
        timing, model_context, trace.set_span_in_context(compute)
    ):
        begin, end = (
            clamp(begin, marks.request_start, marks.compute_end),
            clamp(end, begin, marks.compute_end),
        )
        tracer.start_span(name, context, SpanKind.INTERNAL, start_time=at(begin)).end(at(end))
    compute.end(at(marks.compute_end))
    model.add_event("REQUEST_END", timestamp=at(marks.compute_end))
    if timing.failed:
        for span in (model, root):
            span.set_status(Status(StatusCode.ERROR, failure_text(timing)))
    model.end(at(marks.compute_end))
    root.end(at(marks.compute_end))


def model_attributes(timing: RequestTiming, number: int) -> dict[str, str | int | float]:
    """Triton's attributes of the model's span, and vLLM's request latencies (seconds)."""
    version: str | int = int(timing.version) if timing.version.isdigit() else timing.version
    attributes: dict[str, str | int | float] = {
        "triton.model_name": timing.model,
        "triton.model_version": version,
        "triton.trace_id": number,
        "triton.trace_parent_id": 0,
    }
    if timing.request_id:
        attributes["triton.request_id"] = timing.request_id
        attributes["gen_ai.request.id"] = timing.request_id
    engine = timing.engine
    if engine is not None and engine.scheduled_ns and engine.last_token_ns:
        arrival = engine.arrival_ns or engine.queued_ns
        first_token = engine.first_token_ns or engine.last_token_ns
        attributes.update(
            {
                "gen_ai.latency.time_in_queue": (
                    engine.scheduled_ns - (engine.queued_ns or arrival)
                )
                / SECONDS,
                "gen_ai.latency.time_to_first_token": (first_token - arrival) / SECONDS,
                "gen_ai.latency.e2e": (engine.last_token_ns - arrival) / SECONDS,
                "gen_ai.latency.time_in_model_prefill": (first_token - engine.scheduled_ns)
                / SECONDS,
                "gen_ai.latency.time_in_model_decode": (engine.last_token_ns - first_token)
                / SECONDS,
                "gen_ai.latency.time_in_model_inference": (
                    engine.last_token_ns - engine.scheduled_ns
                )
                / SECONDS,
            }
        )
    return attributes


def engine_phases(
    timing: RequestTiming, model_context: Context, compute_context: Context
) -> Iterator[tuple[str, Context, int, int]]:
    """vLLM's phases of the request as (span name, parent, start, end): its scheduler's queue
    under the model's span, prefill and decode under `compute`."""
    engine = timing.engine
    if engine is None or not (engine.scheduled_ns and engine.last_token_ns):
        return
    first_token = engine.first_token_ns or engine.last_token_ns
    if engine.queued_ns:
        yield "vllm.queue", model_context, engine.queued_ns, engine.scheduled_ns
    yield "vllm.prefill", compute_context, engine.scheduled_ns, first_token
    yield "vllm.decode", compute_context, first_token, engine.last_token_ns


def failure_text(timing: RequestTiming) -> str:
    reason = failure_reason(timing)
    return f"{reason}: {timing.error}" if timing.error is not None else reason
