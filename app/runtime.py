"""What every frontend serves from, built once per process by the composition root."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry

from app.core.service import GenerationService
from app.observability.statistics import InferenceStatistics
from app.repository.registry import ModelRegistry


class ProcessGroup(Protocol):
    """The frontend processes sharing this one's engines (`FRONTEND_PROCESSES` > 1)."""

    async def metrics(self) -> bytes:
        """The Prometheus exposition of every process, merged."""
        ...


@dataclass(frozen=True)
class Runtime:
    """The model registry, the generation service, the metrics registry and the inference
    statistics of this process."""

    registry: ModelRegistry
    generation: GenerationService
    metrics_registry: CollectorRegistry
    statistics: InferenceStatistics
    group: ProcessGroup | None = None
