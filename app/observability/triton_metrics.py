"""Triton's per-model inference metrics (`nv_inference_*`, its names, types, labels and HELP
texts) read at scrape time from the statistics the core records for every protocol and from
the registry's admitted requests. Every served model version has its series from the start,
the four failure reasons included, as Triton creates them when it loads a model."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.observability.labels import MODEL_LABELS
from app.observability.metrics_config import MetricsConfig
from app.observability.statistics import (
    FAILURE_REASONS,
    LATENCIES,
    InferenceStatistics,
    ModelStatistics,
)
from app.repository.registry import ModelRegistry

COUNTERS = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_request_failure": "Number of failed inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (does not include cached requests)",
    "nv_inference_exec_count": (
        "Number of model executions performed (does not include cached requests)"
    ),
}
LATENCY_COUNTERS = {
    "request": (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    "queue": (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    "compute_input": (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    "compute_infer": (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    "compute_output": (
        "nv_inference_compute_output_duration_us",
        (
            "Cumulative inference compute output duration in microseconds (does not include cached "
            "requests)"
        ),
    ),
}
LATENCY_SUMMARIES = {
    "request": (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    "queue": (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    "compute_input": (
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    "compute_infer": (
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    "compute_output": (
        "nv_inference_compute_output_summary_us",
        (
            "Cumulative inference compute output duration in microseconds (does not include cached "
            "requests)"
        ),
    ),
}
PENDING = (
    "nv_inference_pending_request_count",
    "Instantaneous number of pending requests awaiting execution per-model.",
)
FIRST_RESPONSE = (
    "nv_inference_first_response_histogram_ms",
    "Duration from request to first response in milliseconds",
)
TRITON_COUNTER_FAMILIES = frozenset(
    [*COUNTERS, *(name for name, _ in LATENCY_COUNTERS.values()), "nv_energy_consumption"]
)
"""Triton's counters, exposed under their own names (no `_total`, as Triton writes them)."""

ModelKey = tuple[str, str]


class TritonMetricsCollector(Collector):
    """The `nv_inference_*` families of every served model version (and of any that served
    requests and is gone since, until its statistics are reset)."""

    def __init__(
        self, registry: ModelRegistry, statistics: InferenceStatistics, config: MetricsConfig
    ) -> None:
        self._registry = registry
        self._statistics = statistics
        self._config = config

    def collect(self) -> Iterator[Metric]:
        pending = {
            (served.name, served.version): len(served.in_flight) for served in self._registry
        }
        models = sorted(set(pending) | {key for key, _ in self._statistics.items()})
        stats = {key: self._statistics.model(*key) for key in models}
        yield from self._counters(stats)
        gauge = GaugeMetricFamily(*PENDING, labels=MODEL_LABELS)
        for key in models:
            gauge.add_metric(list(key), pending.get(key, 0))
        yield gauge
        if self._config.histogram_latencies:
            yield first_response_histogram(stats)
        if self._config.summary_latencies:
            yield from summaries(stats, self._config.summary_quantiles)

    def _counters(self, stats: dict[ModelKey, ModelStatistics]) -> Iterator[Metric]:
        made = {
            name: CounterMetricFamily(name, doc, labels=MODEL_LABELS)
            for name, doc in COUNTERS.items()
        }
        failure = CounterMetricFamily(
            "nv_inference_request_failure",
            COUNTERS["nv_inference_request_failure"],
            labels=[*MODEL_LABELS, "reason"],
        )
        made["nv_inference_request_failure"] = failure
        latencies = {
            phase: CounterMetricFamily(name, doc, labels=MODEL_LABELS)
            for phase, (name, doc) in LATENCY_COUNTERS.items()
        }
        for key, model in stats.items():
            labels = list(key)
            made["nv_inference_request_success"].add_metric(labels, model.success.count)
            for reason in FAILURE_REASONS:
                failure.add_metric([*labels, reason], model.failures[reason])
            made["nv_inference_count"].add_metric(labels, model.inference_count)
            made["nv_inference_exec_count"].add_metric(labels, model.execution_count)
            for phase, duration in model.durations().items():
                latencies[phase].add_metric(labels, duration.ns // 1000)
        yield from made.values()
        if self._config.counter_latencies:
            yield from latencies.values()


def first_response_histogram(stats: dict[ModelKey, ModelStatistics]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(*FIRST_RESPONSE, labels=MODEL_LABELS)
    for key, model in stats.items():
        histogram = model.first_response_ms
        if histogram is not None:
            family.add_metric(list(key), histogram.cumulative(), histogram.total)
    return family


def summaries(stats: dict[ModelKey, ModelStatistics], ranks: tuple[float, ...]) -> Iterator[Metric]:
    for phase in LATENCIES:
        name, doc = LATENCY_SUMMARIES[phase]
        family = SummaryMetricFamily(name, doc, labels=MODEL_LABELS)
        for key, model in stats.items():
            if model.summaries_us is None:
                continue
            summary = model.summaries_us[phase]
            family.add_metric(list(key), summary.count, summary.total)
            for rank, value in zip(ranks, summary.quantiles(ranks), strict=True):
                family.add_sample(
                    name, {"model": key[0], "version": key[1], "quantile": str(rank)}, value
                )
        yield family
