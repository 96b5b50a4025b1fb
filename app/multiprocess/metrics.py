"""One Prometheus exposition from every frontend process's own: samples with the same name
and labels are added up (requests, tokens, histograms, in-flight gauges), except those that
describe something all processes share (the host's CPU and GPUs, an engine core), and the
quantiles of summaries (which cannot be added), which take the largest value."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from app.observability.exposition import exposition
from app.observability.system_metrics import SYSTEM_FAMILIES

SHARED_FAMILIES = frozenset(
    {"server_engine_restarts", "vllm:gpu_cache_usage_perc", *SYSTEM_FAMILIES}
)
"""Families every process reports for the same shared thing: an engine core's restart (each
process's client restarts with it), the core's cache usage, the host's CPU and GPUs."""

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


class MergedFamilies(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def merge_expositions(texts: Iterable[str]) -> bytes:
    """The text exposition of the processes' families merged sample by sample."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[SampleKey, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            merged = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type)
            )
            samples = values.setdefault(merged.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                shared = family.name in SHARED_FAMILIES or "quantile" in sample.labels
                samples[key] = combine(sample.name, samples.get(key), sample.value, shared)
    for name, merged in families.items():
        for (sample_name, labels), value in values[name].items():
            merged.add_sample(sample_name, dict(labels), value)
    return exposition(MergedFamilies(list(families.values())))


def combine(sample: str, seen: float | None, value: float, shared: bool) -> float:
    if seen is None:
        return value
    if sample.endswith("_created"):
        return min(seen, value)
    if shared:
        return max(seen, value) if not math.isnan(seen) else value  # NaN: a summary without samples
    return seen + value
