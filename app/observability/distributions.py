"""Latency distributions behind Triton's optional metrics: a histogram's bucket counts and a
summary's quantiles over a sliding window (prometheus-cpp's summaries: the last 60 s)."""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

SUMMARY_WINDOW_SECONDS = 60.0
"""How far back a summary's quantiles look (prometheus-cpp's default max age)."""
SUMMARY_MAX_SAMPLES = 100_000
"""Most observations one summary keeps for its window (the oldest go first beyond it)."""


@dataclass(slots=True)
class BucketCounts:
    """A histogram: how many observations fell at or below each bound, their count and sum."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    count: int = 0
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)
        if index < len(self.bounds):
            self.counts[index] += 1
        self.count += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, observations at or below it) for each bound, then `+Inf`."""
        running, buckets = 0, []
        for bound, count in zip(self.bounds, self.counts, strict=True):
            running += count
            buckets.append((format_bound(bound), running))
        buckets.append(("+Inf", self.count))
        return buckets


def format_bound(bound: float) -> str:
    """A bucket bound as Prometheus clients write `le` (`100.0`)."""
    return str(floatToGoString(bound))


@dataclass(slots=True)
class SlidingQuantiles:
    """A summary: quantiles of the observations of the last `window` seconds, and the count
    and sum of every observation."""

    window: float = SUMMARY_WINDOW_SECONDS
    samples: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=SUMMARY_MAX_SAMPLES)
    )
    count: int = 0
    total: float = 0.0

    def observe(self, value: float, now: float | None = None) -> None:
        self.samples.append((time.monotonic() if now is None else now, value))
        self.count += 1
        self.total += value

    def quantiles(self, ranks: tuple[float, ...], now: float | None = None) -> list[float]:
        """Each rank's value among the window's observations (NaN when there are none)."""
        oldest = (time.monotonic() if now is None else now) - self.window
        while self.samples and self.samples[0][0] < oldest:
            self.samples.popleft()
        values = sorted(value for _, value in self.samples)
        if not values:
            return [math.nan] * len(ranks)
        return [
            values[min(len(values) - 1, max(0, math.ceil(rank * len(values)) - 1))]
            for rank in ranks
        ]
