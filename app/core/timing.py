"""How long each phase of a request took, from its arrival in the core to its end, with the
engine's own timeline where the engine reports one: what the statistics, Triton's metrics
and traces report."""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

TRACE_CONTEXT: ContextVar[Mapping[str, str] | None] = ContextVar("trace_context", default=None)
"""The W3C trace context headers (`traceparent`, `tracestate`) of the call being served: set by
each frontend for its call, read by the core when a request of that call arrives."""


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class EngineTimeline:
    """The engine's marks of one request in monotonic nanoseconds (0: not reached): taken by the
    engine (arrival), queued in its scheduler, first scheduled, first and last token."""

    arrival_ns: int = 0
    queued_ns: int = 0
    scheduled_ns: int = 0
    first_token_ns: int = 0
    last_token_ns: int = 0

    def merged(self, other: EngineTimeline) -> EngineTimeline:
        """One request's timeline over several engine requests (an OpenAI request with several
        prompts): the earliest start of each phase, the latest last token."""
        return EngineTimeline(
            arrival_ns=earliest(self.arrival_ns, other.arrival_ns),
            queued_ns=earliest(self.queued_ns, other.queued_ns),
            scheduled_ns=earliest(self.scheduled_ns, other.scheduled_ns),
            first_token_ns=earliest(self.first_token_ns, other.first_token_ns),
            last_token_ns=max(self.last_token_ns, other.last_token_ns),
        )


def earliest(first: int, second: int) -> int:
    """The earlier of two marks, where 0 is 'not reached'."""
    return min(first, second) if first and second else first or second


@dataclass(slots=True)
class RequestTiming:
    """Monotonic nanosecond marks of one request, from its arrival in the core to its end.

    With the engine's timeline: input is arrival in the core until the engine took it
    (checks, prompt rendering, tokenization), queue until the engine first scheduled it,
    infer until its last token, output until the response was complete. Without one: queue
    until admitted, input until the first chunk, infer until the end less the time the
    frontend held each chunk (output).
    """

    model: str
    version: str
    request_id: str = ""
    arrived_ms: int = field(default_factory=epoch_ms)
    started_ns: int = field(default_factory=time.monotonic_ns)
    admitted_ns: int | None = None
    first_chunk_ns: int | None = None
    first_response_ns: int | None = None
    finished_ns: int | None = None
    held_ns: int = 0
    failed: bool = False
    error: BaseException | None = None
    """Why the request failed, when it did because of an exception."""
    complete: bool = False
    """The whole response was handed to the frontend."""
    cancelled: bool = False
    """The frontend closed the request before its response was complete (the client left)."""
    engine: EngineTimeline | None = None
    trace_context: Mapping[str, str] | None = field(default_factory=TRACE_CONTEXT.get)

    def admitted(self) -> None:
        self.admitted_ns = time.monotonic_ns()

    def chunk(self) -> None:
        if self.first_chunk_ns is None:
            self.first_chunk_ns = time.monotonic_ns()

    def responded(self) -> None:
        """The frontend got its first response of the request."""
        if self.first_response_ns is None:
            self.first_response_ns = time.monotonic_ns()

    def engine_reported(self, timeline: EngineTimeline | None) -> None:
        if timeline is not None:
            self.engine = timeline if self.engine is None else self.engine.merged(timeline)

    def fail(self, error: BaseException | None = None) -> None:
        self.failed = True
        self.error = error

    def finish(self) -> None:
        self.finished_ns = time.monotonic_ns()

    @property
    def end_ns(self) -> int:
        return self.finished_ns or time.monotonic_ns()

    @property
    def total_ns(self) -> int:
        return max(0, self.end_ns - self.started_ns)

    @property
    def engine_marks(self) -> tuple[int, int, int] | None:
        """(taken, scheduled, last token) of a request the engine ran to its end, clamped
        within the request's own time; None without them."""
        engine = self.engine
        if engine is None or not (engine.scheduled_ns and engine.last_token_ns):
            return None
        end = self.end_ns
        taken = clamp(
            engine.arrival_ns or engine.queued_ns or self.started_ns, self.started_ns, end
        )
        scheduled = clamp(engine.scheduled_ns, taken, end)
        return taken, scheduled, clamp(engine.last_token_ns, scheduled, end)

    @property
    def queue_ns(self) -> int:
        marks = self.engine_marks
        if marks is not None:
            return marks[1] - marks[0]
        return 0 if self.admitted_ns is None else self.admitted_ns - self.started_ns

    @property
    def input_ns(self) -> int:
        marks = self.engine_marks
        if marks is not None:
            return marks[0] - self.started_ns
        if self.admitted_ns is None or self.first_chunk_ns is None:
            return 0
        return self.first_chunk_ns - self.admitted_ns

    @property
    def infer_ns(self) -> int:
        marks = self.engine_marks
        if marks is not None:
            return marks[2] - marks[1]
        if self.first_chunk_ns is None or self.finished_ns is None:
            return 0
        return max(0, self.finished_ns - self.first_chunk_ns - self.held_ns)

    @property
    def output_ns(self) -> int:
        marks = self.engine_marks
        if marks is not None:
            return self.end_ns - marks[2]
        return self.held_ns

    @property
    def first_response_delay_ns(self) -> int | None:
        if self.first_response_ns is None:
            return None
        return max(0, self.first_response_ns - self.started_ns)


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


class StatisticsRecorder(Protocol):
    """Told of every request the core ran, when it ends (Triton's statistics extension,
    metrics, traces)."""

    def record_request(self, timing: RequestTiming) -> None: ...
