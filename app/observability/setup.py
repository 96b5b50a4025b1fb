"""What a process records of its requests and host, built from plain options: Triton's
statistics and `nv_` metrics, its CPU and GPU gauges, and its traces."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields

from prometheus_client import CollectorRegistry

from app.observability.metrics_config import parse_metrics_config
from app.observability.metrics_server import MetricsHttpServer, serve_metrics
from app.observability.recorders import Recorders
from app.observability.statistics import InferenceStatistics
from app.observability.system_metrics import SystemMetrics
from app.observability.trace_config import parse_trace_config
from app.observability.trace_settings import TraceSettings
from app.observability.tracing import RequestTracer
from app.observability.triton_metrics import TritonMetricsCollector
from app.repository.registry import ModelRegistry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObservabilityOptions:
    """Triton's --metrics-config and --trace-config options, --allow-metrics,
    --allow-cpu-metrics, --allow-gpu-metrics and --metrics-interval-ms (the settings' names)."""

    metrics_config: list[str] = field(default_factory=list)
    trace_config: list[str] = field(default_factory=list)
    allow_metrics: bool = True
    allow_cpu_metrics: bool = True
    allow_gpu_metrics: bool = True
    metrics_interval_ms: float = 2000

    @classmethod
    def names(cls) -> set[str]:
        return {option.name for option in fields(cls)}


@dataclass
class Observability:
    statistics: InferenceStatistics
    tracer: RequestTracer
    system_metrics: SystemMetrics | None
    recorder: Recorders
    """Every request the core ends goes to the statistics and the tracer."""
    metrics_registry: CollectorRegistry
    metrics_port: MetricsHttpServer | None = None

    def start(self, address: str, port: int) -> None:
        """Serve the metrics on Triton's metrics port (0: none); sample the host's CPU and GPUs."""
        if port:
            self.metrics_port = serve_metrics(address, port, self.metrics_registry)
        if self.system_metrics is not None:
            self.system_metrics.start()

    def stop(self) -> None:
        """Export the traces still queued; stop sampling and serving the metrics port."""
        self.tracer.shutdown()
        if self.system_metrics is not None:
            self.system_metrics.stop()
        if self.metrics_port is not None:
            self.metrics_port.stop()


def build_observability(
    registry: ModelRegistry, metrics_registry: CollectorRegistry, options: ObservabilityOptions
) -> Observability:
    """The recorders of the core's requests, their collectors registered in `metrics_registry`."""
    metrics_config = parse_metrics_config(options.metrics_config)
    trace_config = parse_trace_config(options.trace_config)
    for option in metrics_config.unknown:
        logger.warning("--metrics-config %s: not a setting Triton knows; ignored", option)
    for option in trace_config.unknown:
        logger.warning("--trace-config %s: not a setting Triton knows; ignored", option)
    statistics = InferenceStatistics(metrics_config.latency_options())
    metrics_registry.register(TritonMetricsCollector(registry, statistics, metrics_config))
    system_metrics = None
    if options.allow_metrics and (options.allow_cpu_metrics or options.allow_gpu_metrics):
        system_metrics = SystemMetrics(
            options.metrics_interval_ms / 1000,
            cpu=options.allow_cpu_metrics,
            gpu=options.allow_gpu_metrics,
        )
        metrics_registry.register(system_metrics)
    tracer = RequestTracer(TraceSettings(trace_config), trace_config)
    return Observability(
        statistics, tracer, system_metrics, Recorders(statistics, tracer), metrics_registry
    )
