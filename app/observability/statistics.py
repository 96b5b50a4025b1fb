"""Per-model inference statistics in Triton's terms, fed by the generation core for every
protocol (a `StatisticsRecorder`); read by the statistics extension of each frontend."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from app.core.timing import RequestTiming
from app.observability.labels import MODEL_LABELS

BATCH_SIZE = 1
"""Every request runs as its own execution (the backend's decoupled model has no batching)."""


@dataclass(slots=True)
class Duration:
    """Triton's `StatisticDuration`: how many, and their total nanoseconds."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class ModelStatistics:
    """The counters of one model version since it was first used."""

    last_inference: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)

    def record(self, timing: RequestTiming) -> None:
        self.last_inference = max(self.last_inference, timing.arrived_ms)
        if timing.failed:
            self.fail.add(timing.total_ns)
            return
        self.inference_count += BATCH_SIZE
        self.execution_count += 1
        self.success.add(timing.total_ns)
        self.queue.add(timing.queue_ns)
        self.compute_input.add(timing.input_ns)
        self.compute_infer.add(timing.infer_ns)
        self.compute_output.add(timing.output_ns)

    def to_json(self, name: str, version: str) -> dict[str, Any]:
        """Triton's JSON for one model version, members in Triton's order."""
        compute = {
            "compute_input": self.compute_input.to_json(),
            "compute_infer": self.compute_infer.to_json(),
            "compute_output": self.compute_output.to_json(),
        }
        batches = [{"batch_size": BATCH_SIZE, **compute}] if self.execution_count else []
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_json(),
                "fail": self.fail.to_json(),
                "queue": self.queue.to_json(),
                **compute,
                "cache_hit": Duration().to_json(),
                "cache_miss": Duration().to_json(),
            },
            "response_stats": {},
            "batch_stats": batches,
            "memory_usage": [],
        }


class InferenceStatistics:
    """Statistics of every model version this process served (a `StatisticsRecorder`)."""

    def __init__(self) -> None:
        self._models: dict[tuple[str, str], ModelStatistics] = {}

    def record_request(self, timing: RequestTiming) -> None:
        key = (timing.model, timing.version)
        stats = self._models.get(key)
        if stats is None:
            stats = self._models[key] = ModelStatistics()
        stats.record(timing)

    def model_json(self, name: str, version: str) -> dict[str, Any]:
        """Triton's statistics of one model version (zeros when it has served nothing)."""
        return self._models.get((name, version), ModelStatistics()).to_json(name, version)

    def forget(self, name: str) -> None:
        """Drop a model's counters (it was unloaded: a reload starts from zero, as in Triton)."""
        for key in [key for key in self._models if key[0] == name]:
            del self._models[key]

    def items(self) -> list[tuple[tuple[str, str], ModelStatistics]]:
        return sorted(self._models.items())


class StatisticsCollector(Collector):
    """Triton's own request counters from the statistics, read at scrape time:
    `nv_inference_request_success` and `nv_inference_request_failure` (a request that
    failed after its stream began counts as a failure), `nv_inference_count`,
    `nv_inference_exec_count`, and the total request time in microseconds."""

    def __init__(self, statistics: InferenceStatistics) -> None:
        self._statistics = statistics

    def collect(self) -> Iterator[CounterMetricFamily]:
        families = {
            "nv_inference_request_success": "Successful inference requests.",
            "nv_inference_request_failure": "Failed inference requests, also those that failed mid-stream.",
            "nv_inference_count": "Inferences performed.",
            "nv_inference_exec_count": "Inference executions performed.",
            "nv_inference_request_duration_us": "Cumulative inference request duration in microseconds.",
        }
        made = {name: CounterMetricFamily(name, doc, labels=MODEL_LABELS) for name, doc in families.items()}
        for (name, version), stats in self._statistics.items():
            labels = [name, version]
            made["nv_inference_request_success"].add_metric(labels, stats.success.count)
            made["nv_inference_request_failure"].add_metric(labels, stats.fail.count)
            made["nv_inference_count"].add_metric(labels, stats.inference_count)
            made["nv_inference_exec_count"].add_metric(labels, stats.execution_count)
            made["nv_inference_request_duration_us"].add_metric(labels, (stats.success.ns + stats.fail.ns) // 1000)
        yield from made.values()
