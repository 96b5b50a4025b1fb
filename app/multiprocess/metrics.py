"""One Prometheus exposition from every frontend process's own: samples with the same name
and labels are added up (requests, tokens, histograms, in-flight gauges), except those that
describe something all processes share, which take the largest value."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

SHARED_FAMILIES = frozenset({"server_engine_restarts", "vllm:gpu_cache_usage_perc"})
"""Families every process reports for the same shared thing: an engine core's restart (each
process's client restarts with it) and the core's cache usage."""

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
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            samples = values.setdefault(merged.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                samples[key] = combine(family.name, sample.name, samples.get(key), sample.value)
    for name, merged in families.items():
        for (sample_name, labels), value in values[name].items():
            merged.add_sample(sample_name, dict(labels), value)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MergedFamilies(list(families.values())))
    return generate_latest(registry)


def combine(family: str, sample: str, seen: float | None, value: float) -> float:
    if seen is None:
        return value
    if sample.endswith("_created"):
        return min(seen, value)
    if family in SHARED_FAMILIES:
        return max(seen, value)
    return seen + value
