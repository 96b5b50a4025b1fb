"""Engines backed by vLLM for the model registry."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from app.core.types import InferenceEngine
from app.engine.client_slot import CoreBroker
from app.engine.engine_args import vllm_engine_args
from app.engine.engine_options import EngineOptions
from app.engine.grammars import configure_grammar_workers
from app.engine.metrics import MetricsProvider
from app.engine.vllm_engine import VllmEngine
from app.engine.vllm_openai.media import guard_media
from app.repository.layout import EngineArgsCheck, ModelSpec

REPORT_CUSTOM_METRICS = "REPORT_CUSTOM_METRICS"


class VllmEngines:
    """Makes a `VllmEngine` per model version (an `EngineFactory`); their `vllm:` metrics
    are recorded when the model's config.pbtxt sets REPORT_CUSTOM_METRICS (or
    `report_all_metrics`), as in the backend, and kept across restarts and reloads until the
    model is unloaded. Models on vLLM's Ray executor join the Ray cluster at `ray_address`;
    with `cores`, each engine is a client of a core the supervisor process runs."""

    def __init__(
        self,
        metrics_registry: CollectorRegistry,
        cpu_kvcache_space_gib: int,
        report_all_metrics: bool,
        ray_address: str | None = None,
        cores: CoreBroker | None = None,
    ) -> None:
        self._provider = MetricsProvider(metrics_registry)
        self._cpu_kvcache_space_gib = cpu_kvcache_space_gib
        self._report_all_metrics = report_all_metrics
        self._ray_address = ray_address
        self._cores = cores

    def __call__(self, spec: ModelSpec) -> InferenceEngine:
        report = self._report_all_metrics or spec.flag(REPORT_CUSTOM_METRICS)
        metrics = self._provider if report else None
        return VllmEngine(
            spec,
            cpu_kvcache_space_gib=self._cpu_kvcache_space_gib,
            metrics=metrics,
            ray_address=self._ray_address,
            cores=self._cores,
        )

    def forget(self, spec: ModelSpec) -> None:
        """Drop an unloaded model's `vllm:` series, as Triton does."""
        self._provider.remove(spec.name, spec.version)


def vllm_engines(
    metrics_registry: CollectorRegistry, options: EngineOptions, cores: CoreBroker | None = None
) -> tuple[VllmEngines, EngineArgsCheck, Callable[[ModelSpec], None]]:
    """vLLM's engines for the model registry, its check of model.json and what to forget of
    an unloaded model; the engines' grammar workers and clients' media set up as `options`
    say."""
    configure_grammar_workers(options.grammar_workers)
    guard_media(options.max_image_pixels)
    engines = VllmEngines(
        metrics_registry,
        cpu_kvcache_space_gib=options.cpu_kvcache_space_gib,
        report_all_metrics=options.report_all_metrics,
        ray_address=options.ray_address,
        cores=cores,
    )
    return engines, vllm_engine_args, engines.forget
