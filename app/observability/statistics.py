"""Per-model inference statistics in Triton's terms, fed by the generation core for every
protocol (a `StatisticsRecorder`); read by the statistics extension of each frontend and by
Triton's `nv_inference_*` metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.timing import RequestTiming
from app.errors import (
    EngineUnhealthyError,
    ModelUnavailableError,
    OverloadedError,
    RequestTimeoutError,
    ServerError,
)
from app.observability.distributions import BucketCounts, SlidingQuantiles

BATCH_SIZE = 1
"""Every request runs as its own execution (the backend's decoupled model has no batching)."""
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
"""Triton's reasons of a failed request (the `reason` label of nv_inference_request_failure)."""
LATENCIES = ("request", "queue", "compute_input", "compute_infer", "compute_output")
"""The phases of a request Triton's latency counters and summaries report."""


def failure_reason(timing: RequestTiming) -> str:
    """Triton's reason for a failed request: REJECTED when the server turned it away (over
    capacity, past its deadline), CANCELED when the client left before its response was
    complete, BACKEND for an error of the model (after admission), OTHER for the rest."""
    error = timing.error
    if timing.cancelled:
        return "CANCELED"
    if isinstance(error, (OverloadedError, RequestTimeoutError)):
        return "REJECTED"
    if isinstance(error, EngineUnhealthyError):
        return "BACKEND"
    if isinstance(error, ModelUnavailableError) or timing.admitted_ns is None:
        return "OTHER"
    return "BACKEND" if isinstance(error, ServerError) else "OTHER"


@dataclass(frozen=True)
class LatencyOptions:
    """Triton's optional latency metrics: the first-response histogram's bucket bounds (ms)
    and the summaries' quantiles; None: not kept."""

    histogram_buckets: tuple[float, ...] | None = None
    summary_quantiles: tuple[float, ...] | None = None


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
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    first_response_ms: BucketCounts | None = None
    summaries_us: dict[str, SlidingQuantiles] | None = None

    @classmethod
    def with_options(cls, options: LatencyOptions) -> ModelStatistics:
        stats = cls()
        if options.histogram_buckets is not None:
            stats.first_response_ms = BucketCounts(options.histogram_buckets)
        if options.summary_quantiles is not None:
            stats.summaries_us = {phase: SlidingQuantiles() for phase in LATENCIES}
        return stats

    def record(self, timing: RequestTiming) -> None:
        self.last_inference = max(self.last_inference, timing.arrived_ms)
        first_response = timing.first_response_delay_ns
        if self.first_response_ms is not None and first_response is not None:
            self.first_response_ms.observe(first_response / 1e6)
        if timing.failed:
            self.fail.add(timing.total_ns)
            self.failures[failure_reason(timing)] += 1
            return
        self.inference_count += BATCH_SIZE
        self.execution_count += 1
        phases = (
            timing.total_ns,
            timing.queue_ns,
            timing.input_ns,
            timing.infer_ns,
            timing.output_ns,
        )
        for duration, ns in zip(
            (self.success, self.queue, self.compute_input, self.compute_infer, self.compute_output),
            phases,
            strict=True,
        ):
            duration.add(ns)
        if self.summaries_us is not None:
            for phase, ns in zip(LATENCIES, phases, strict=True):
                self.summaries_us[phase].observe(ns / 1000)

    def durations(self) -> dict[str, Duration]:
        """Each latency phase's total, by Triton's phase name."""
        return dict(
            zip(
                LATENCIES,
                (
                    self.success,
                    self.queue,
                    self.compute_input,
                    self.compute_infer,
                    self.compute_output,
                ),
                strict=True,
            )
        )

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

    def __init__(self, options: LatencyOptions | None = None) -> None:
        self.options = options or LatencyOptions()
        self._models: dict[tuple[str, str], ModelStatistics] = {}

    def record_request(self, timing: RequestTiming) -> None:
        key = (timing.model, timing.version)
        stats = self._models.get(key)
        if stats is None:
            stats = self._models[key] = ModelStatistics.with_options(self.options)
        stats.record(timing)

    def model_json(self, name: str, version: str) -> dict[str, Any]:
        """Triton's statistics of one model version (zeros when it has served nothing)."""
        return self._models.get((name, version), ModelStatistics()).to_json(name, version)

    def model(self, name: str, version: str) -> ModelStatistics:
        """One model version's statistics (empty ones, not kept, when it has served nothing)."""
        return self._models.get((name, version)) or ModelStatistics.with_options(self.options)

    def forget(self, name: str) -> None:
        """Drop a model's counters (it was unloaded: a reload starts from zero, as in Triton)."""
        for key in [key for key in self._models if key[0] == name]:
            del self._models[key]

    def items(self) -> list[tuple[tuple[str, str], ModelStatistics]]:
        return sorted(self._models.items())
