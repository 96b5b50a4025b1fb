"""The models this server serves, each version with its own engine; loading and unloading."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import ModelConfigError, ModelNotFoundError
from app.repository.heap import thawed_heap
from app.repository.layout import (
    EngineArgsCheck,
    ModelSpec,
    accept_engine_args,
    load_model,
    load_repository,
    model_names,
)
from app.repository.overrides import ModelOverride, materialise
from app.repository.served_model import ModelState, ServedModel
from app.repository.supervision import EngineFactory, EngineSupervisor, RestartPolicy, stop_quietly

logger = logging.getLogger(__name__)

__all__ = ["EngineFactory", "LifecycleOptions", "ModelRegistry", "RepositoryEntry"]


@dataclass(frozen=True)
class LifecycleOptions:
    """How served models are admitted, drained, supervised and reloaded."""

    drain_timeout: float = 30.0
    max_pending: int | None = None
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    reload_in_place: bool = False
    """Stop the old engines before starting the new ones (no room for both, e.g. on a GPU)."""


@dataclass(frozen=True)
class RepositoryEntry:
    """One line of the repository index."""

    name: str
    version: str | None
    state: str
    reason: str = ""


UNAVAILABLE_REASONS = {
    ModelState.RESTARTING: "engine failed: restarting it",
    ModelState.FAILED: "engine failed: restarts exhausted",
}


class ModelRegistry:
    """Looks models up by name and version; loads, reloads, unloads, starts, supervises and
    stops their engines."""

    def __init__(
        self,
        repository: Path,
        engine_factory: EngineFactory,
        only: list[str] | None = None,
        options: LifecycleOptions | None = None,
        check_engine_args: EngineArgsCheck = accept_engine_args,
        on_unloaded: Callable[[ModelSpec], None] | None = None,
    ) -> None:
        self._repository = repository.resolve()
        self._factory = engine_factory
        self._check_engine_args = check_engine_args
        self._options = options or LifecycleOptions()
        self._on_unloaded = on_unloaded
        self._models: dict[str, dict[str, ServedModel]] = {}
        self._supervisors: dict[int, EngineSupervisor] = {}
        self._reasons: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.restarts: dict[tuple[str, str], int] = {}
        """Engine restarts per (model, version) since the server started."""
        self.draining = False
        """True once a graceful shutdown began: frontends open no new streams."""
        for spec in load_repository(repository, only, check_engine_args):
            served = self._new(spec)
            self._models.setdefault(spec.name, {})[spec.version] = served

    def _new(self, spec: ModelSpec) -> ServedModel:
        return ServedModel(spec=spec, engine=self._factory(spec), max_pending=self._options.max_pending)

    def __iter__(self) -> Iterator[ServedModel]:
        for versions in list(self._models.values()):
            yield from list(versions.values())

    @property
    def is_live(self) -> bool:
        """False once a model's engine failed for good (its restarts are exhausted)."""
        return not any(served.state is ModelState.FAILED for served in self)

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
                entries.append(index_entry(served))
            if not loaded:
                reason = self._reasons.get(name, "not loaded")
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
        self._supervise(served)
        logger.info("model '%s' version %s is ready", served.name, served.version)

    def _supervise(self, served: ServedModel) -> None:
        supervisor = EngineSupervisor(served, self._factory, self._options.restart, self._count_restart)
        self._supervisors[id(served)] = supervisor
        supervisor.start()

    def _count_restart(self, served: ServedModel, cause: str) -> None:
        key = (served.name, served.version)
        self.restarts[key] = self.restarts.get(key, 0) + 1

    async def load(self, name: str, override: ModelOverride | None = None) -> None:
        """(Re)load a model: read its config anew (or the override) and start its engines.

        A loaded model keeps serving until its new engines are ready, then drains; if they
        fail to start it keeps serving and the error is raised. With `reload_in_place` the
        old engines stop first; the model answers 503 meanwhile, never 404.
        """
        if name not in model_names(self._repository):
            raise ModelConfigError(f"failed to load '{name}': no such model in the repository")
        async with self._change(name):
            await self._load(name, override)

    async def _load(self, name: str, override: ModelOverride | None) -> None:
        with materialise(self._repository / name, override) as model_dir:
            specs = load_model(model_dir, self._repository, self._check_engine_args)
            current = list(self._models.get(name, {}).values())
            if current and not self._options.reload_in_place:
                await self._reload_beside(name, specs, current)
            else:
                await self._retire(current, ModelState.UNLOADING)
                await self._load_fresh(name, specs)
        self._reasons.pop(name, None)

    async def _reload_beside(self, name: str, specs: list[ModelSpec], current: list[ServedModel]) -> None:
        fresh = [self._new(spec) for spec in specs]
        try:
            for served in fresh:
                await self._start(served)
        except BaseException:
            await self._retire(fresh, ModelState.UNAVAILABLE)
            raise
        self._models[name] = {served.version: served for served in fresh}
        await self._retire(current, ModelState.UNLOADING)

    async def _load_fresh(self, name: str, specs: list[ModelSpec]) -> None:
        fresh = [self._new(spec) for spec in specs]
        self._models[name] = {served.version: served for served in fresh}
        try:
            for served in fresh:
                await self._start(served)
        except BaseException as exc:
            self._models.pop(name, None)
            self._reasons[name] = f"load failed: {exc}"
            await self._retire(fresh, ModelState.UNAVAILABLE)
            raise

    async def unload(self, name: str) -> None:
        """Stop admitting requests to `name`, let running ones finish, stop its engines."""
        async with self._change(name):
            await self._unload(name)

    async def _unload(self, name: str) -> None:
        served_versions = self.versions(name)
        await self._retire(served_versions, ModelState.UNLOADING)
        self._models.pop(name, None)
        self._reasons[name] = "unloaded"
        if self._on_unloaded is not None:
            for served in served_versions:
                self._on_unloaded(served.spec)

    async def _retire(self, served_versions: list[ServedModel], state: ModelState) -> None:
        """Stop supervising, drain (running requests finish, or are aborted after the drain
        timeout) and stop the engines of these model versions."""
        await self._stop_supervising(served_versions)
        await asyncio.gather(*(s.drain(state, self._options.drain_timeout) for s in served_versions))
        await self._stop_engines(served_versions)

    async def drain(self) -> None:
        """For a graceful shutdown: every model stops admitting, lets running requests
        finish up to the drain timeout, then aborts the rest."""
        self.draining = True
        served_versions = list(self)
        await self._stop_supervising(served_versions)
        await asyncio.gather(*(s.drain(ModelState.DRAINING, self._options.drain_timeout) for s in served_versions))

    async def shutdown(self) -> None:
        """Stop every engine; one failing to stop does not keep the others running."""
        served_versions = list(self)
        await self._stop_supervising(served_versions)
        await self._stop_engines(served_versions)

    async def _stop_supervising(self, served_versions: list[ServedModel]) -> None:
        supervisors = [self._supervisors.pop(id(s), None) for s in served_versions]
        await asyncio.gather(*(s.stop() for s in supervisors if s is not None))

    async def _stop_engines(self, served_versions: list[ServedModel]) -> None:
        for served in served_versions:
            served.state = ModelState.UNAVAILABLE
        await asyncio.gather(*(stop_quietly(served.engine) for served in served_versions))

    @asynccontextmanager
    async def _change(self, name: str) -> AsyncIterator[None]:
        """A load or unload of `name`: one at a time per model, with the heap thawed so that
        the engines it stops are collected, frozen again after it (app/repository/heap.py).
        The change itself runs in a coroutine of its own, which holds the engines it
        stopped: once it returned, none of them is frozen with the heap."""
        async with self._locks.setdefault(name, asyncio.Lock()):
            with thawed_heap():
                yield


def index_entry(served: ServedModel) -> RepositoryEntry:
    """A loaded version as the index shows it: a failed engine is UNAVAILABLE with a reason."""
    if served.state in UNAVAILABLE_REASONS:
        return RepositoryEntry(served.name, served.version, ModelState.UNAVAILABLE.value, UNAVAILABLE_REASONS[served.state])
    if served.state is ModelState.READY and not served.is_ready:
        return RepositoryEntry(served.name, served.version, ModelState.UNAVAILABLE.value, "engine unhealthy")
    return RepositoryEntry(served.name, served.version, served.state.value)
