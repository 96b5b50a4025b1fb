"""Triton's statistics extension: which models a query covers and their statistics JSON."""

from __future__ import annotations

from typing import Any

from app.errors import InvalidRequestError, ModelNotFoundError
from app.observability.statistics import InferenceStatistics
from app.repository.registry import ModelRegistry
from app.repository.served_model import ServedModel


def statistics_json(
    registry: ModelRegistry, statistics: InferenceStatistics, name: str = "", version: str = ""
) -> dict[str, Any]:
    """`{"model_stats": [...]}` of every ready model version, or of one model (its ready
    versions) or one version; Triton's errors for a model or version that is not ready."""
    served = (
        ready_versions(registry, name, version) if name else [m for m in registry if m.is_ready]
    )
    served.sort(key=lambda m: (m.name, int(m.version)))
    return {"model_stats": [statistics.model_json(m.name, m.version) for m in served]}


def ready_versions(registry: ModelRegistry, name: str, version: str) -> list[ServedModel]:
    try:
        versions = registry.versions(name)
    except ModelNotFoundError:
        raise InvalidRequestError(f"requested model '{name}' is not available") from None
    if version:
        chosen = [m for m in versions if m.version == version and m.is_ready]
        if not chosen:
            raise InvalidRequestError(
                f"requested model version is not available for model '{name}'"
            )
        return chosen
    ready = [m for m in versions if m.is_ready]
    if not ready:
        raise InvalidRequestError(f"requested model '{name}' is not available")
    return ready
