"""What every frontend serves from, built once per process by the composition root."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry

from app.core.service import GenerationService
from app.observability.setup import Observability
from app.observability.statistics import InferenceStatistics
from app.observability.trace_settings import SettingsChange, TraceSettings
from app.repository.registry import ModelRegistry


class ProcessGroup(Protocol):
    """The frontend processes sharing this one's engines (`FRONTEND_PROCESSES` > 1)."""

    async def metrics(self) -> bytes:
        """The Prometheus exposition of every process, merged."""
        ...

    async def share_log_settings(self) -> None:
        """Have every other process take this one's log settings (the logging extension)."""
        ...

    async def share_trace_setting(self, model: str, change: SettingsChange) -> None:
        """Have every other process make the same change of a trace setting (the trace
        extension; '' the global setting)."""
        ...


@dataclass(frozen=True)
class Runtime:
    """The model registry, the generation service, the metrics registry and the inference
    statistics of this process; its traces and the host's CPU and GPU gauges."""

    registry: ModelRegistry
    generation: GenerationService
    metrics_registry: CollectorRegistry
    statistics: InferenceStatistics
    group: ProcessGroup | None = None
    observability: Observability | None = None

    @property
    def trace_settings(self) -> TraceSettings | None:
        """Triton's trace settings (None: no tracing in this process)."""
        return None if self.observability is None else self.observability.tracer.settings
