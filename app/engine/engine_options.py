"""What the vLLM engine factory takes from the settings: plain values, importable without
vLLM (the composition root builds them before it loads vLLM)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.worker_pool import WorkerOptions


@dataclass(frozen=True)
class EngineOptions:
    """The engines' KV cache on CPU hosts, their `vllm:` metrics, their Ray cluster, their
    grammar workers, and the bound on an image a client's media URL may carry."""

    cpu_kvcache_space_gib: int = 2
    report_all_metrics: bool = False
    """Every model's `vllm:` metrics, not only where config.pbtxt sets REPORT_CUSTOM_METRICS."""
    ray_address: str | None = None
    grammar_workers: WorkerOptions = field(default_factory=WorkerOptions)
    max_image_pixels: int = 4096 * 4096
    """Pixels of one image in OpenAI content (MAX_IMAGE_PIXELS, as Triton's images)."""
