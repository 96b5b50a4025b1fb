"""The models this server serves, each with its own engine."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

from app.engine.repository import ModelSpec
from app.engine.types import InferenceEngine
from app.errors import ModelNotFoundError, ModelUnavailableError

logger = logging.getLogger(__name__)

EngineFactory = Callable[[ModelSpec], InferenceEngine]

APPLY_CHAT_TEMPLATE = "APPLY_CHAT_TEMPLATE"
UNHEALTHY_MESSAGE = "Model is unavailable due to unhealthy vLLM engine"


class ModelState(str, Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass
class ServedModel:
    """One model version and its engine."""

    spec: ModelSpec
    engine: InferenceEngine
    state: ModelState = ModelState.LOADING

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def version(self) -> str:
        return self.spec.version

    @property
    def chat_template_by_default(self) -> bool:
        return self.spec.flag(APPLY_CHAT_TEMPLATE)

    @property
    def is_ready(self) -> bool:
        return self.state is ModelState.READY and self.engine.is_healthy

    def ensure_ready(self) -> None:
        """Raise the error a request to this model gets when it cannot be served."""
        if self.state is ModelState.LOADING:
            raise ModelUnavailableError(f"Model '{self.name}' version {self.version} is loading")
        if not self.is_ready:
            raise ModelUnavailableError(UNHEALTHY_MESSAGE)


class ModelRegistry:
    """Looks models up by name and version; starts and stops their engines."""

    def __init__(self, specs: list[ModelSpec], engine_factory: EngineFactory) -> None:
        self._models: dict[str, dict[str, ServedModel]] = {}
        for spec in specs:
            served = ServedModel(spec=spec, engine=engine_factory(spec))
            self._models.setdefault(spec.name, {})[spec.version] = served

    def __iter__(self) -> Iterator[ServedModel]:
        for versions in self._models.values():
            yield from versions.values()

    def get(self, name: str, version: str | None = None) -> ServedModel:
        """The requested version, or the highest one when `version` is empty."""
        versions = self._models.get(name)
        if not versions:
            raise ModelNotFoundError(f"Request for unknown model: '{name}' is not found")
        if not version:
            return versions[max(versions, key=int)]
        served = versions.get(version)
        if served is None:
            raise ModelNotFoundError(
                f"Request for unknown model: '{name}' version {version} is not found"
            )
        return served

    async def start(self) -> None:
        """Start every engine, one after another; stop those started if one fails."""
        for served in self:
            logger.info("starting engine for model '%s' version %s", served.name, served.version)
            try:
                await served.engine.start()
            except BaseException:
                served.state = ModelState.UNAVAILABLE
                await self.shutdown()
                raise
            served.state = ModelState.READY
            logger.info("model '%s' version %s is ready", served.name, served.version)

    async def shutdown(self) -> None:
        """Stop every engine; one failing to stop does not keep the others running."""
        for served in self:
            served.state = ModelState.UNAVAILABLE
        results = await asyncio.gather(
            *(served.engine.shutdown() for served in self), return_exceptions=True
        )
        for served, result in zip(self, results):
            if isinstance(result, BaseException):
                logger.error("engine of '%s' failed to stop: %s", served.name, result)
