"""Triton's `--metrics-config <setting>=<value>` options: which latency metrics are reported
(counters by default; histograms and summaries on request) and the summaries' quantiles."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.observability.statistics import LatencyOptions

DEFAULT_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)
"""Triton's summary quantiles (its errors, 0.05 to 0.001, do not apply: quantiles are exact)."""
FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
"""Triton's buckets of nv_inference_first_response_histogram_ms."""
SWITCHES = ("counter_latencies", "histogram_latencies", "summary_latencies")


@dataclass(frozen=True)
class MetricsConfig:
    counter_latencies: bool = True
    histogram_latencies: bool = False
    summary_latencies: bool = False
    summary_quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    unknown: tuple[str, ...] = ()
    """Settings Triton does not know either (it ignores them; the server logs them)."""

    def latency_options(self) -> LatencyOptions:
        return LatencyOptions(
            histogram_buckets=FIRST_RESPONSE_BUCKETS_MS if self.histogram_latencies else None,
            summary_quantiles=self.summary_quantiles if self.summary_latencies else None,
        )


def parse_metrics_config(options: Iterable[str]) -> MetricsConfig:
    """The options (`<setting>=<value>` each, the last of a setting wins); a `ValueError`
    naming the option for a value that is not one."""
    values: dict[str, object] = {}
    unknown: list[str] = []
    for option in options:
        setting, _, value = option.partition("=")
        if setting in SWITCHES:
            values[setting] = switch(setting, value)
        elif setting == "summary_quantiles":
            values[setting] = quantiles(value)
        else:
            unknown.append(option)
    return MetricsConfig(**values, unknown=tuple(unknown))  # type: ignore[arg-type]


def switch(setting: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ValueError(f"--metrics-config {setting}: expected true or false, got {value!r}")
    return value.lower() == "true"


def quantiles(value: str) -> tuple[float, ...]:
    """`<quantile>:<error>,...` (Triton's format) as the quantiles, each within [0, 1]."""
    ranks = []
    for pair in value.split(","):
        rank, colon, error = pair.partition(":")
        try:
            parsed = float(rank)
            float(error)
        except ValueError:
            parsed = -1.0
        if not colon or not 0 <= parsed <= 1:
            raise ValueError(
                f"--metrics-config summary_quantiles: invalid option [{pair}]; the format is "
                "<quantile>:<error>,... with quantiles in [0, 1]"
            )
        ranks.append(parsed)
    return tuple(ranks)
