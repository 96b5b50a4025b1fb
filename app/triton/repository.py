"""Triton's model repository extension on every protocol: load with its error texts."""

from __future__ import annotations

import logging

from app.errors import ModelConfigError, ModelLoadError, ServerError
from app.observability.statistics import InferenceStatistics
from app.repository.overrides import ModelOverride
from app.repository.registry import ModelRegistry

logger = logging.getLogger(__name__)


async def load_model(
    registry: ModelRegistry, statistics: InferenceStatistics, name: str, override: ModelOverride | None = None
) -> None:
    """(Re)load a model, with Triton's overrides if given; a failure is a `ModelLoadError`
    naming the model. A reloaded model's statistics start from zero, as in Triton."""
    try:
        await registry.load(name, override)
    except ModelConfigError as exc:
        raise ModelLoadError(str(exc)) from exc
    except ServerError:
        raise
    except Exception as exc:
        logger.exception("loading model '%s' failed", name)
        raise ModelLoadError(f"load failed for model '{name}': {exc}") from exc
    statistics.forget(name)
