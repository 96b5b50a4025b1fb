"""Per-model load gauges read at scrape time: what the server admitted, what the engine holds."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.observability.labels import MODEL_LABELS as LABELS
from app.repository.registry import ModelRegistry


class ModelLoadCollector(Collector):
    """`server_requests_in_flight` (admitted by this server, running or queued),
    `server_engine_requests_unfinished` (the engine's own count) per served model version,
    `server_engine_restarts_total` per model version that was ever restarted and
    `server_requests_migrated_total` per model version whose requests resumed on a new engine.

    Read when scraped, so they are exact even while the engine is idle (vLLM's own
    `vllm:num_requests_*` gauges only change when the engine steps).
    """

    def __init__(self, registry: ModelRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        in_flight = GaugeMetricFamily(
            "server_requests_in_flight",
            "Requests admitted by this server and not yet finished.",
            labels=LABELS,
        )
        unfinished = GaugeMetricFamily(
            "server_engine_requests_unfinished",
            "Requests the engine holds (running or waiting), by the engine's own count.",
            labels=LABELS,
        )
        for served in self._registry:
            labels = [served.name, served.version]
            in_flight.add_metric(labels, len(served.in_flight))
            unfinished.add_metric(labels, served.num_unfinished_requests)
        yield in_flight
        yield unfinished
        restarts = CounterMetricFamily(
            "server_engine_restarts",
            "Engines replaced after a failure "
            "(engine process gone, dead, or a failed health probe).",
            labels=LABELS,
        )
        for (name, version), count in sorted(self._registry.restarts.items()):
            restarts.add_metric([name, version], count)
        yield restarts
        migrated = CounterMetricFamily(
            "server_requests_migrated",
            "Requests that resumed on a restarted engine after theirs failed.",
            labels=LABELS,
        )
        for (name, version), count in sorted(self._registry.migrations.items()):
            migrated.add_metric([name, version], count)
        yield migrated
