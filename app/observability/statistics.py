"""Per-model inference statistics in Triton's terms, fed by the generation core for every
protocol (a `StatisticsRecorder`); read by the statistics extension of each frontend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.timing import RequestTiming

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
