"""The models this server serves, each version with its own engine; loading and unloading."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from app.engine.repository import ModelSpec, load_model, load_repository, model_names
from app.engine.types import InferenceEngine
from app.errors import (
    UNHEALTHY_MESSAGE,
    ModelConfigError,
    ModelNotFoundError,
    ModelUnavailableError,
    OverloadedError,
)

logger = logging.getLogger(__name__)

EngineFactory = Callable[[ModelSpec], InferenceEngine]

APPLY_CHAT_TEMPLATE = "APPLY_CHAT_TEMPLATE"
ENABLE_VLLM_HEALTH_CHECK = "ENABLE_VLLM_HEALTH_CHECK"


ABORT_GRACE_SECONDS = 5.0
SHUTDOWN_MESSAGE = "Request aborted: the server is shutting down"


class ModelState(str, Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    DRAINING = "DRAINING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass
class ServedModel:
    """One model version, its engine, and the requests it is running."""

    spec: ModelSpec
    engine: InferenceEngine
    state: ModelState = ModelState.LOADING
    max_pending: int | None = None
    in_flight: dict[str, bool] = field(default_factory=dict)
    """Admitted request ids -> whether the server aborted them."""
    _idle: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def __post_init__(self) -> None:
        self._idle.set()

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
        if self.state is ModelState.UNLOADING:
            raise ModelUnavailableError(f"Model '{self.name}' version {self.version} is unloading")
        if self.state is ModelState.DRAINING:
            raise ModelUnavailableError("Server is shutting down: no new requests are admitted")
        if not self.is_ready:
            raise ModelUnavailableError(UNHEALTHY_MESSAGE)

    @asynccontextmanager
    async def request_slot(self, request_id: str) -> AsyncIterator[None]:
        """Admit a request and count it as in flight for as long as it runs.

        Beyond `max_pending` admitted requests the answer is 503 with Retry-After. With
        ENABLE_VLLM_HEALTH_CHECK the engine is checked first, as the backend does; a failed
        check leaves the model unavailable. A request the server aborted (drain, unload)
        ends with a 503 error instead of its partial output.
        """
        self.ensure_ready()
        if self.max_pending is not None and len(self.in_flight) >= self.max_pending:
            raise OverloadedError(
                f"Model '{self.name}' is overloaded: {len(self.in_flight)} requests pending; retry later"
            )
        if self.spec.flag(ENABLE_VLLM_HEALTH_CHECK):
            try:
                await self.engine.check_health()
            except ModelUnavailableError:
                self.state = ModelState.UNAVAILABLE
                raise
        self.in_flight[request_id] = False
        self._idle.clear()
        try:
            yield
            if self.in_flight[request_id]:
                raise ModelUnavailableError(SHUTDOWN_MESSAGE)
        finally:
            del self.in_flight[request_id]
            if not self.in_flight:
                self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight; False if `timeout` seconds pass first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def drain(self, state: ModelState, timeout: float) -> None:
        """Stop admitting; let running requests finish for `timeout` s, then abort the rest."""
        self.state = state
        if await self.wait_idle(timeout):
            return
        logger.warning(
            "model '%s' version %s: aborting %d requests still running after %.0f s",
            self.name, self.version, len(self.in_flight), timeout,
        )
        for request_id in list(self.in_flight):
            self.in_flight[request_id] = True
            await self.engine.abort(request_id)
        await self.wait_idle(ABORT_GRACE_SECONDS)

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
    ) -> None:
        self._repository = repository.resolve()
        self._factory = engine_factory
        self._drain_timeout = drain_timeout
        self._max_pending = max_pending
        self._models: dict[str, dict[str, ServedModel]] = {}
        self._unloaded: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        for spec in load_repository(repository, only):
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
            specs = load_model(self._repository / name, self._repository)
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
