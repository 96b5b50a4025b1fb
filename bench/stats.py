"""Figures of one target at one concurrency level, computed from its request records."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.workload import LevelRun


def percentile(values: Sequence[float], q: int) -> float | None:
    """The q-th percentile (1..99), interpolated between samples; None without samples."""
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


@dataclass(frozen=True, slots=True)
class LevelStats:
    """What the table shows for one target and concurrency."""

    target: str
    concurrency: int
    requests: int
    errors: int
    output_tokens: int
    seconds: float
    tokens_per_s: float
    requests_per_s: float
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    itl_ms_p50: float | None
    itl_ms_p99: float | None
    first_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(target: str, run: LevelRun) -> LevelStats:
    """Throughput over all requests; latencies over the requests that succeeded.

    Inter-token latency is the gap between two consecutive events of a request, divided by
    the tokens the later event brought (one, nearly always).
    """
    ok = [r for r in run.records if r.error is None]
    failed = [r for r in run.records if r.error is not None]
    ttfts = [r.times[0] - r.start for r in ok if r.times]
    itls = [
        (later - earlier) / count
        for r in ok
        for earlier, later, count in zip(r.times, r.times[1:], r.counts[1:], strict=False)
    ]
    tokens = sum(r.tokens for r in run.records)
    seconds = max(run.seconds, 1e-9)
    return LevelStats(
        target=target,
        concurrency=run.concurrency,
        requests=len(run.records),
        errors=len(failed),
        output_tokens=tokens,
        seconds=round(run.seconds, 3),
        tokens_per_s=round(tokens / seconds, 1),
        requests_per_s=round(len(ok) / seconds, 2),
        ttft_ms_p50=ms(percentile(ttfts, 50)),
        ttft_ms_p99=ms(percentile(ttfts, 99)),
        itl_ms_p50=ms(percentile(itls, 50)),
        itl_ms_p99=ms(percentile(itls, 99)),
        first_error=failed[0].error if failed else None,
    )


@dataclass(frozen=True, slots=True)
class Ratio:
    """`ours` against another target at one concurrency."""

    concurrency: int
    versus: str
    tokens_per_s: float | None
    ttft_p50: float | None
    ttft_p50_delta_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratios(results: Sequence[LevelStats], ours: str = "ours") -> list[Ratio]:
    """ours/engine and ours/vllm-openai for tokens/s and TTFT p50, per concurrency."""
    by_key = {(s.target, s.concurrency): s for s in results}
    found = []
    for versus in ("engine", "vllm-openai"):
        for (target, concurrency), mine in by_key.items():
            other = by_key.get((versus, concurrency))
            if target != ours or other is None:
                continue
            found.append(
                Ratio(
                    concurrency=concurrency,
                    versus=versus,
                    tokens_per_s=divide(mine.tokens_per_s, other.tokens_per_s),
                    ttft_p50=divide(mine.ttft_ms_p50, other.ttft_ms_p50),
                    ttft_p50_delta_ms=subtract(mine.ttft_ms_p50, other.ttft_ms_p50),
                )
            )
    return found


def divide(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def subtract(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 2)


def protocol_ratios(
    results: Sequence[LevelStats], grpc: str = "ours-grpc", sse: str = "ours"
) -> list[Ratio]:
    """Our gRPC stream against our SSE stream (same server, same workload), per concurrency."""
    by_key = {(s.target, s.concurrency): s for s in results}
    found = []
    for (target, concurrency), mine in sorted(by_key.items(), key=lambda item: item[0][1]):
        other = by_key.get((sse, concurrency))
        if target != grpc or other is None:
            continue
        found.append(
            Ratio(
                concurrency=concurrency,
                versus=sse,
                tokens_per_s=divide(mine.tokens_per_s, other.tokens_per_s),
                ttft_p50=divide(mine.ttft_ms_p50, other.ttft_ms_p50),
                ttft_p50_delta_ms=subtract(mine.ttft_ms_p50, other.ttft_ms_p50),
            )
        )
    return found
