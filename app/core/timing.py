"""How long each phase of a request took in the core, for the statistics frontends report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class RequestTiming:
    """Monotonic nanosecond marks of one request, from its arrival in the core to its end.

    queue: arrival until admitted; input: admitted until the first chunk (prompt processing);
    infer: first chunk until the end, less the time the frontend held each chunk (output).
    """

    model: str
    version: str
    arrived_ms: int = field(default_factory=epoch_ms)
    started_ns: int = field(default_factory=time.perf_counter_ns)
    admitted_ns: int | None = None
    first_chunk_ns: int | None = None
    finished_ns: int | None = None
    output_ns: int = 0
    failed: bool = False

    def admitted(self) -> None:
        self.admitted_ns = time.perf_counter_ns()

    def chunk(self) -> None:
        if self.first_chunk_ns is None:
            self.first_chunk_ns = time.perf_counter_ns()

    def finish(self) -> None:
        self.finished_ns = time.perf_counter_ns()

    @property
    def total_ns(self) -> int:
        return max(0, (self.finished_ns or time.perf_counter_ns()) - self.started_ns)

    @property
    def queue_ns(self) -> int:
        return 0 if self.admitted_ns is None else self.admitted_ns - self.started_ns

    @property
    def input_ns(self) -> int:
        if self.admitted_ns is None or self.first_chunk_ns is None:
            return 0
        return self.first_chunk_ns - self.admitted_ns

    @property
    def infer_ns(self) -> int:
        if self.first_chunk_ns is None or self.finished_ns is None:
            return 0
        return max(0, self.finished_ns - self.first_chunk_ns - self.output_ns)


class StatisticsRecorder(Protocol):
    """Told of every request the core ran, when it ends (Triton's statistics extension)."""

    def record_request(self, timing: RequestTiming) -> None: ...
