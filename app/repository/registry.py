"""The models this server serves, each version with its own engine; loading and unloading."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.core.types import InferenceEngine
from app.errors import ModelConfigError, ModelNotFoundError
from app.repository.layout import (
    EngineArgsCheck,
    ModelSpec,
    accept_engine_args,
    load_model,
    load_repository,
    model_names,
)
from app.repository.served_model import ModelState, ServedModel

logger = logging.getLogger(__name__)

EngineFactory = Callable[[ModelSpec], InferenceEngine]


@dataclass(frozen=True)
class RepositoryEntry:
    """One line of the repository index."""

    name: str
    version: str | None
    state: str
    reason: str = ""


class ModelRegistry:
    """Looks models up by name and version; loads, unloads, starts and stops their engines."""

    def __init__(
        self,
        repository: Path,
        engine_factory: EngineFactory,
        only: list[str] | None = None,
        drain_timeout: float = 30.0,
        max_pending: int | None = None,
        check_engine_args: EngineArgsCheck = accept_engine_args,
    ) -> None:
        self._repository = repository.resolve()
        self._factory = engine_factory
        self._check_engine_args = check_engine_args
        self._drain_timeout = drain_timeout
        self._max_pending = max_pending
        self._models: dict[str, dict[str, ServedModel]] = {}
        self._unloaded: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self.draining = False
        """True once a graceful shutdown began: frontends open no new streams."""
        for spec in load_repository(repository, only, check_engine_args):
            self._add(spec)

    def _add(self, spec: ModelSpec) -> ServedModel:
        served = ServedModel(spec=spec, engine=self._factory(spec), max_pending=self._max_pending)
        self._models.setdefault(spec.name, {})[spec.version] = served
        return served

    def __iter__(self) -> Iterator[ServedModel]:
        for versions in list(self._models.values()):
            yield from list(versions.values())

    def versions(self, name: str) -> list[ServedModel]:
        """The loaded versions of `name`, oldest first; 404 when none is loaded."""
        versions = self._models.get(name)
        if not versions:
            raise ModelNotFoundError(f"Request for unknown model: '{name}' is not found")
        return [versions[v] for v in sorted(versions, key=int)]

    def get(self, name: str, version: str | None = None) -> ServedModel:
        """The requested version, or the highest one when `version` is empty."""
        versions = self.versions(name)
        if not version:
            return versions[-1]
        for served in versions:
            if served.version == version:
                return served
        raise ModelNotFoundError(
            f"Request for unknown model: '{name}' version {version} is not found"
        )

    def index(self) -> list[RepositoryEntry]:
        """Every model of the repository folder with the state of each loaded version."""
        entries = []
        for name in model_names(self._repository):
            loaded = self._models.get(name, {})
            for served in (loaded[v] for v in sorted(loaded, key=int)):
                reason = "" if served.is_ready else "engine unhealthy" if served.state is ModelState.READY else ""
                state = ModelState.UNAVAILABLE if reason else served.state
                entries.append(RepositoryEntry(name, served.version, state.value, reason))
            if not loaded:
                reason = "unloaded" if name in self._unloaded else "not loaded"
                entries.append(RepositoryEntry(name, None, ModelState.UNAVAILABLE.value, reason))
        return entries

    async def start(self) -> None:
        """Start every engine, one after another; stop those started if one fails."""
        for served in self:
            try:
                await self._start(served)
            except BaseException:
                await self.shutdown()
                raise

    async def _start(self, served: ServedModel) -> None:
        logger.info("starting engine for model '%s' version %s", served.name, served.version)
        try:
            await served.engine.start()
        except BaseException:
            served.state = ModelState.UNAVAILABLE
            raise
        served.state = ModelState.READY
        logger.info("model '%s' version %s is ready", served.name, served.version)

    async def load(self, name: str) -> None:
        """(Re)load a model from the repository: read its config anew and start its engines."""
        if name not in model_names(self._repository):
            raise ModelConfigError(f"failed to load '{name}': no such model in the repository")
        async with self._lock(name):
            specs = load_model(self._repository / name, self._repository, self._check_engine_args)
            if name in self._models:
                await self._unload(name)
            started = [self._add(spec) for spec in specs]
            self._unloaded.discard(name)
            try:
                for served in started:
                    await self._start(served)
            except BaseException:
                await self._unload(name)
                raise

    async def unload(self, name: str) -> None:
        """Stop admitting requests to `name`, let running ones finish, stop its engines."""
        async with self._lock(name):
            self.versions(name)
            await self._unload(name)
            self._unloaded.add(name)

    async def _unload(self, name: str) -> None:
        served_versions = list(self._models.get(name, {}).values())
        await asyncio.gather(
            *(s.drain(ModelState.UNLOADING, self._drain_timeout) for s in served_versions)
        )
        self._models.pop(name, None)
        await self._stop_engines(served_versions)

    async def drain(self) -> None:
        """For a graceful shutdown: every model stops admitting, lets running requests
        finish up to the drain timeout, then aborts the rest."""
        self.draining = True
        await asyncio.gather(*(s.drain(ModelState.DRAINING, self._drain_timeout) for s in self))

    async def shutdown(self) -> None:
        """Stop every engine; one failing to stop does not keep the others running."""
        served_versions = list(self)
        for served in served_versions:
            served.state = ModelState.UNAVAILABLE
        await self._stop_engines(served_versions)

    async def _stop_engines(self, served_versions: list[ServedModel]) -> None:
        results = await asyncio.gather(
            *(served.engine.shutdown() for served in served_versions), return_exceptions=True
        )
        for served, result in zip(served_versions, results):
            served.state = ModelState.UNAVAILABLE
            if isinstance(result, BaseException):
                logger.error("engine of '%s' failed to stop: %s", served.name, result)

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())
