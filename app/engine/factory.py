"""Engines backed by vLLM for the model registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from app.core.types import InferenceEngine
from app.engine.metrics import MetricsProvider
from app.engine.vllm_engine import VllmEngine
from app.repository.layout import ModelSpec
from app.repository.registry import EngineFactory

REPORT_CUSTOM_METRICS = "REPORT_CUSTOM_METRICS"


def vllm_engine_factory(
    metrics_registry: CollectorRegistry,
    cpu_kvcache_space_gib: int,
    report_all_metrics: bool,
    ray_address: str | None = None,
) -> EngineFactory:
    """A `VllmEngine` per model version; its `vllm:` metrics recorded when the model's
    config.pbtxt sets REPORT_CUSTOM_METRICS (or `report_all_metrics`), as in the backend.
    Models on vLLM's Ray executor join the Ray cluster at `ray_address`."""
    provider = MetricsProvider(metrics_registry)

    def create(spec: ModelSpec) -> InferenceEngine:
        report = report_all_metrics or spec.flag(REPORT_CUSTOM_METRICS)
        return VllmEngine(
            spec,
            cpu_kvcache_space_gib=cpu_kvcache_space_gib,
            metrics=provider if report else None,
            ray_address=ray_address,
        )

    return create
