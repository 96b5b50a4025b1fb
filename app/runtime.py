"""What every frontend serves from, built once per process by the composition root, and
what runs around serving: the engines, the metrics port and the repository poll."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry

from app.core.service import GenerationService
from app.multiprocess.link import FrontendProcessLink
from app.observability.setup import Observability
from app.observability.statistics import InferenceStatistics
from app.observability.trace_settings import SettingsChange, TraceSettings
from app.repository.heap_freezer import freeze_heap, release_heap
from app.repository.poll import RepositoryPoller
from app.repository.registry import ModelRegistry
from app.triton.model_table import model_table

logger = logging.getLogger(__name__)


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
class ServingOptions:
    """What runs around serving: the metrics port (0: none here), the heap freeze after
    start-up, and Triton's poll mode (None: no polling)."""

    metrics_address: str = ""
    metrics_port: int = 0
    freeze_heap: bool = True
    poll_seconds: float | None = None
    poll_models: list[str] | None = None
    """The models the poll follows (None: every one)."""


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

    @asynccontextmanager
    async def serving(
        self, options: ServingOptions, link: FrontendProcessLink | None = None
    ) -> AsyncIterator[None]:
        """Start-up and shutdown around serving: the metrics port (the supervisor's, with
        several frontend processes), the engines (then the heap frozen: full collections
        while serving skip the start-up heap), the repository poll (in one process: the
        first of several, whose loads and unloads the others follow); then everything
        stopped in reverse."""
        first = link is None or link.index == 0
        if self.observability is not None:
            port = options.metrics_port if link is None else 0
            self.observability.start(options.metrics_address, port)
        await self._start_engines(link, options.freeze_heap)
        if first:
            logger.info(model_table(self.registry.index()))
        poller = None
        if options.poll_seconds is not None and first:
            poller = RepositoryPoller(self.registry, options.poll_seconds, options.poll_models)
            await poller.start()
        try:
            yield
        finally:
            if poller is not None:
                await poller.stop()
            await self.registry.shutdown()
            if link is not None:
                await link.close()
            if self.observability is not None:
                self.observability.stop()
            release_heap()

    async def _start_engines(self, link: FrontendProcessLink | None, freeze: bool) -> None:
        """Start the engines (as one of several frontend processes: on the group's shared
        cores), then freeze the heap."""
        if link is not None:
            await link.connect()
        await self.registry.start()
        if link is not None:
            await link.ready()
        if freeze:
            freeze_heap()
