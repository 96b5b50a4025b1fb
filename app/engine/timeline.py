"""vLLM's timeline of a request (its `RequestOutput.metrics`) as the core's `EngineTimeline`."""

from __future__ import annotations

import time
from typing import Any

from app.core.timing import EngineTimeline

NS = 1_000_000_000


def engine_timeline(output: Any) -> EngineTimeline | None:
    """The timeline of a finished request output, in monotonic nanoseconds; None for an
    unfinished output or an engine that keeps no statistics (`disable_log_stats`).

    vLLM stamps the arrival with the wall clock and the rest with the engine core's monotonic
    clock (the same host's clock: the core runs beside its client)."""
    stats = getattr(output, "metrics", None)
    if not getattr(output, "finished", False) or stats is None:
        return None
    arrival_s = getattr(stats, "arrival_time", 0.0)
    arrival_ns = 0
    if arrival_s:
        arrival_ns = time.monotonic_ns() - (time.time_ns() - int(arrival_s * NS))
    return EngineTimeline(
        arrival_ns=max(arrival_ns, 0),
        queued_ns=seconds_to_ns(getattr(stats, "queued_ts", 0.0)),
        scheduled_ns=seconds_to_ns(getattr(stats, "scheduled_ts", 0.0)),
        first_token_ns=seconds_to_ns(getattr(stats, "first_token_ts", 0.0)),
        last_token_ns=seconds_to_ns(getattr(stats, "last_token_ts", 0.0)),
    )


def seconds_to_ns(seconds: float) -> int:
    return int(seconds * NS) if seconds else 0
