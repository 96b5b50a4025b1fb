"""Triton's model repository extension on every protocol: load with its error texts."""

from __future__ import annotations

import logging

from app.errors import (
    ModelConfigError,
    ModelControlDisabledError,
    ModelLoadError,
    ModelUnavailableError,
    ServerError,
)
from app.observability.statistics import InferenceStatistics
from app.paths import PROJECT_ROOT
from app.repository.overrides import ModelOverride
from app.repository.registry import ModelRegistry
from app.security.redaction import client_message

logger = logging.getLogger(__name__)


DRAINING_MESSAGE = "Server is shutting down: no model is loaded or unloaded"


def check_control_requests(registry: ModelRegistry) -> None:
    """Load and unload requests are taken in Triton's explicit mode only, and not once the
    server drains (Triton answers both as unavailable: no engine starts during a stop)."""
    if registry.draining:
        raise ModelUnavailableError(DRAINING_MESSAGE)
    if not registry.takes_control_requests:
        raise ModelControlDisabledError()


async def unload_model(registry: ModelRegistry, name: str) -> None:
    """Unload a model at a client's request."""
    check_control_requests(registry)
    await registry.unload(name)


async def load_model(
    registry: ModelRegistry,
    statistics: InferenceStatistics,
    name: str,
    override: ModelOverride | None = None,
) -> None:
    """(Re)load a model at a client's request, with Triton's overrides if given; a failure is
    a `ModelLoadError` naming the model. A reloaded model's statistics start from zero, as in
    Triton."""
    check_control_requests(registry)
    roots = (*registry.repositories, PROJECT_ROOT)
    try:
        await registry.load(name, override)
    except ModelConfigError as exc:
        logger.warning("loading model '%s' failed: %s", name, exc)
        raise ModelLoadError(client_message(str(exc), roots)) from exc
    except ServerError:
        raise
    except Exception as exc:
        logger.exception("loading model '%s' failed", name)
        raise ModelLoadError(
            f"load failed for model '{name}': {client_message(str(exc), roots)}"
        ) from exc
    statistics.forget(name)
