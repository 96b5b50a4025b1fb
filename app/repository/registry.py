"""The models this server serves, each version with its own engine; loading and unloading."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from app.errors import ModelConfigError, ModelNotFoundError
from app.paths import PROJECT_ROOT
from app.repository.engines import Supervision, new_served_model, start_engines, stop_engines
from app.repository.heap_freezer import thawed_heap
from app.repository.index import RepositoryEntry, repository_index
from app.repository.instances import MAX_INSTANCES_PER_MODEL, HostDevices
from app.repository.layout import (
    DUPLICATE_REASON,
    REPOSITORY_FILES,
    EngineArgsCheck,
    ModelReader,
    ModelSpec,
    accept_engine_args,
    model_folders,
)
from app.repository.overrides import (
    ModelOverride,
    OverrideFolder,
    OverrideLimits,
    write_override_folder,
)
from app.repository.served_model import ModelState, ServedModel, hand_over
from app.repository.supervision import EngineFactory, EngineSupervisor, RestartPolicy
from app.security.redaction import client_message

logger = logging.getLogger(__name__)

__all__ = ["EngineFactory", "LifecycleOptions", "ModelControl", "ModelRegistry"]


class ModelControl(str, Enum):
    """Triton's model control modes: who decides which models are loaded."""

    NONE = "none"
    """Every model is loaded at start; load and unload requests are refused."""
    EXPLICIT = "explicit"
    """The chosen models are loaded at start; clients load and unload the rest."""
    POLL = "poll"
    """Every model is loaded at start; the repository folder decides after that."""


@dataclass(frozen=True)
class LifecycleOptions:
    """How served models are controlled, admitted, drained, supervised and reloaded."""

    model_control: ModelControl = ModelControl.NONE
    override_limits: OverrideLimits = field(default_factory=OverrideLimits)
    """How many `file:` overrides a load request may carry, and how many bytes in all."""
    drain_timeout: float = 30.0
    max_pending: int | None = None
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    reload_in_place: bool = False
    """Stop the old engines before starting the new ones (no room for both, e.g. on a GPU)."""
    exit_on_error: bool = True
    """A model that fails to load at start stops the start (Triton's --exit-on-error); else
    it is UNAVAILABLE and the others serve."""
    strict_readiness: bool = True
    """The server is ready only while every model is (Triton's --strict-readiness)."""
    allow_instance_pin: bool = False
    """A request may name the instance it runs on (app/core/routing.py's PIN_HEADER)."""
    max_instances: int = MAX_INSTANCES_PER_MODEL
    """The most instances (engines) config.pbtxt's `instance_group` may give a model version."""
    config_name: str | None = None
    """Triton's --model-config-name: models are configured from `configs/<name>.pbtxt`."""


NOT_UNIQUE = "failed to poll model '%s': not unique across all model repositories"
"""Triton's log line for a model whose folder is in two repositories."""


class ModelRegistry:
    """Looks models up by name and version; loads, reloads, unloads, starts, supervises and
    stops their engines (one per instance). `repository`: one folder or several (Triton's
    repeated --model-repository); `only`: the models to load at start (None: every one);
    `devices`: where instances are placed (default: this host's GPUs and cores)."""

    def __init__(
        self,
        repository: Path | Sequence[Path],
        engine_factory: EngineFactory,
        only: Collection[str] | None = None,
        options: LifecycleOptions | None = None,
        check_engine_args: EngineArgsCheck = accept_engine_args,
        on_unloaded: Callable[[ModelSpec], None] | None = None,
        devices: HostDevices | None = None,
    ) -> None:
        roots = [repository] if isinstance(repository, Path) else list(repository)
        self._roots = tuple(root.resolve() for root in roots)
        self._factory = engine_factory
        self._options = options or LifecycleOptions()
        self._on_unloaded = on_unloaded
        devices = devices or HostDevices(max_instances=self._options.max_instances)
        self._reader = ModelReader(check_engine_args, devices, self._options.config_name)
        self._models: dict[str, dict[str, ServedModel]] = {}
        self._supervision = Supervision(
            engine_factory, self._options.restart, self._count_restart, self._count_migration
        )
        self._reasons: dict[str, str] = {}
        self._reasons_at_start: set[str] = set()
        """Models that failed to load at start and have not loaded since (strict readiness;
        as in Triton, a model in two repositories is not one: it was never tried)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._override_folders: dict[str, OverrideFolder] = {}
        """The folder a load request's override was written to, per model loaded from one."""
        self.restarts: dict[tuple[str, str], int] = {}
        """Engine restarts per (model, version) since the server started."""
        self.migrations: dict[tuple[str, str], int] = {}
        """Requests per (model, version) that resumed on a restarted engine."""
        self.draining = False
        """True once a graceful shutdown began: frontends open no new streams."""
        for spec in self._startup_specs(only):
            served = self._new(spec)
            self._models.setdefault(spec.name, {})[spec.version] = served

    def _startup_specs(self, only: Collection[str] | None) -> list[ModelSpec]:
        """The versions to serve at start. A model that cannot be read (or whose folder is in
        two repositories) stops the start, or with `exit_on_error` off is UNAVAILABLE."""
        for root in self._roots:
            if not root.is_dir():
                raise ModelConfigError(f"model repository {root} is not a directory")
        folders, duplicates = model_folders(self._roots)
        wanted = sorted(folders.keys() | duplicates) if only is None else sorted(set(only))
        specs: list[ModelSpec] = []
        for name in wanted:
            try:
                specs += self._read(name, folders, duplicates)
            except ModelConfigError as exc:
                if self._options.exit_on_error or name not in folders.keys() | duplicates:
                    raise
                reason = str(exc).removeprefix(f"failed to load '{name}': ")
                logger.error("failed to load '%s': %s", name, reason)
                self._reasons[name] = self._load_failure(exc)
        return specs

    def _read(self, name: str, folders: dict[str, Path], duplicates: set[str]) -> list[ModelSpec]:
        if name in duplicates:
            logger.error(NOT_UNIQUE, name)
            raise ModelConfigError(f"failed to load '{name}': {DUPLICATE_REASON}")
        if name not in folders:
            roots = ", ".join(map(str, self._roots))
            raise ModelConfigError(f"models ['{name}'] not found in repository {roots}")
        return self._reader.read(folders[name], folders[name].parent)

    def _load_failure(self, exc: BaseException) -> str:
        if DUPLICATE_REASON in str(exc):
            return DUPLICATE_REASON
        return f"load failed: {client_message(str(exc), (*self._roots, PROJECT_ROOT))}"

    def _new(self, spec: ModelSpec) -> ServedModel:
        return new_served_model(
            spec, self._factory, self._options.max_pending, self._options.allow_instance_pin
        )

    @property
    def _supervisors(self) -> dict[int, list[EngineSupervisor]]:
        """id(served model) -> the supervisor of each of its instances."""
        return self._supervision.supervisors

    def __iter__(self) -> Iterator[ServedModel]:
        for versions in list(self._models.values()):
            yield from list(versions.values())

    @property
    def repository(self) -> Path:
        """The first repository folder."""
        return self._roots[0]

    @property
    def repositories(self) -> tuple[Path, ...]:
        return self._roots

    def model_folders(self) -> dict[str, Path]:
        """Each servable model's folder (those in two repositories left out)."""
        return model_folders(self._roots)[0]

    @property
    def override_limits(self) -> OverrideLimits:
        return self._options.override_limits

    @property
    def takes_control_requests(self) -> bool:
        """Whether clients may load and unload models (Triton's explicit mode)."""
        return self._options.model_control is ModelControl.EXPLICIT

    @property
    def is_ready(self) -> bool:
        """The server's readiness: every model ready (with strict readiness, also none that
        failed to load), or with strict readiness off, always."""
        if not self._options.strict_readiness:
            return True
        return not self._reasons_at_start and all(served.is_ready for served in self)

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
        """Every model of the repository folders with the state of each loaded version; one
        in two repositories is UNAVAILABLE, as Triton lists it."""
        return repository_index(*model_folders(self._roots), self._models, self._reasons)

    async def start(self) -> None:
        """Start every engine, one after another; stop those started if one fails (with
        `exit_on_error` off, that model is UNAVAILABLE and the others start)."""
        for served in self:
            try:
                await self._start(served)
            except Exception as exc:
                if self._options.exit_on_error:
                    await self.shutdown()
                    raise
                logger.error("failed to load '%s' version %s: %s", served.name, served.version, exc)
                await self._drop_failed(served, exc)
            except BaseException:
                await self.shutdown()
                raise
        self._reasons_at_start = {
            name for name, reason in self._reasons.items() if reason != DUPLICATE_REASON
        }

    async def _drop_failed(self, served: ServedModel, exc: Exception) -> None:
        failed = self._models.pop(served.name, {})
        self._reasons[served.name] = self._load_failure(exc)
        await stop_engines(list(failed.values()))

    async def _start(self, served: ServedModel) -> None:
        """Start the version's engines and supervise them; once the server drains, it admits
        nothing."""
        await start_engines(served)
        if self.draining:
            served.state = ModelState.DRAINING
            return
        self._supervision.start(served)

    def _count_restart(self, served: ServedModel, cause: str) -> None:
        key = (served.name, served.version)
        self.restarts[key] = self.restarts.get(key, 0) + 1

    def _count_migration(self, served: ServedModel) -> None:
        key = (served.name, served.version)
        self.migrations[key] = self.migrations.get(key, 0) + 1

    async def load(self, name: str, override: ModelOverride | None = None) -> None:
        """(Re)load a model: read its config anew (or the override) and start its engines.

        A loaded model keeps serving until its new engines are ready, then drains; if they
        fail to start it keeps serving and the error is raised. With `reload_in_place` the
        old engines stop first; the model answers 503 meanwhile, never 404.
        """
        folders, duplicates = model_folders(self._roots)
        if name in duplicates:
            logger.error(NOT_UNIQUE, name)
            raise ModelConfigError(f"failed to load '{name}': {DUPLICATE_REASON}")
        if name not in folders:
            raise ModelConfigError(f"failed to load '{name}': no such model in the repository")
        async with self._change(name):
            await self._load(name, folders[name], override)

    async def _load(self, name: str, folder: Path, override: ModelOverride | None) -> None:
        staged = await write_override_folder(folder, override) if override is not None else None
        try:
            provenance = override.provenance if override is not None else REPOSITORY_FILES
            model_dir = staged.path if staged is not None else folder
            specs = self._reader.read(model_dir, folder.parent, provenance)
            current = list(self._models.get(name, {}).values())
            if current and not self._options.reload_in_place:
                await self._reload_beside(name, specs, current)
            else:
                await self._retire(current, ModelState.UNLOADING)
                await self._load_fresh(name, specs)
        except BaseException:
            if staged is not None:
                await staged.remove()
            if name not in self._models:  # its engines stopped: a reload in place failed
                await self._replace_override_folder(name, None)
            raise
        await self._replace_override_folder(name, staged)
        self._reasons.pop(name, None)
        self._reasons_at_start.discard(name)

    async def _replace_override_folder(self, name: str, staged: OverrideFolder | None) -> None:
        """Keep `staged` (None: no folder) for `name`, whose engines now run from it; remove
        the folder its engines ran from before."""
        previous = self._override_folders.pop(name, None)
        if staged is not None:
            self._override_folders[name] = staged
        if previous is not None:
            await previous.remove()

    async def _reload_beside(
        self, name: str, specs: list[ModelSpec], current: list[ServedModel]
    ) -> None:
        fresh = [self._new(spec) for spec in specs]
        try:
            for served in fresh:
                await self._start(served)
        except BaseException:
            await self._retire(fresh, ModelState.UNAVAILABLE)
            raise
        self._models[name] = hand_over(current, fresh)
        await self._retire(current, ModelState.UNLOADING)

    async def _load_fresh(self, name: str, specs: list[ModelSpec]) -> None:
        fresh = [self._new(spec) for spec in specs]
        self._models[name] = {served.version: served for served in fresh}
        try:
            for served in fresh:
                await self._start(served)
        except BaseException as exc:
            self._models.pop(name, None)
            self._reasons[name] = self._load_failure(exc)
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
        await self._replace_override_folder(name, None)
        self._reasons[name] = "unloaded"
        self._reasons_at_start.discard(name)
        if self._on_unloaded is not None:
            for served in served_versions:
                self._on_unloaded(served.spec)

    async def _retire(self, served_versions: list[ServedModel], state: ModelState) -> None:
        """Drain these model versions, then stop their engines."""
        await self._drain(served_versions, state)
        await stop_engines(served_versions)

    async def drain(self) -> None:
        """For a graceful shutdown: readiness and every model refuse new requests at once;
        running requests finish up to the drain timeout, the rest are aborted."""
        self.draining = True
        await self._drain(list(self), ModelState.DRAINING)

    async def _drain(self, served_versions: list[ServedModel], state: ModelState) -> None:
        """Refuse new requests (before anything is awaited), stop supervising, let running
        requests finish (aborted after the drain timeout)."""
        for served in served_versions:
            served.state = state
        await self._supervision.stop(served_versions)
        timeout = self._options.drain_timeout
        await asyncio.gather(*(served.drain(timeout) for served in served_versions))

    async def shutdown(self) -> None:
        """Stop every engine (one failing to stop does not keep the others running); remove
        the folders of load overrides."""
        served_versions = list(self)
        await self._supervision.stop(served_versions)
        await stop_engines(served_versions)
        for name in list(self._override_folders):
            await self._replace_override_folder(name, None)

    @asynccontextmanager
    async def _change(self, name: str) -> AsyncIterator[None]:
        """A load or unload of `name`: one at a time per model, with the heap thawed so that
        the engines it stops are collected, frozen again after it (app/repository/heap_freezer.py).
        The change itself runs in a coroutine of its own, which holds the engines it
        stopped: once it returned, none of them is frozen with the heap."""
        async with self._locks.setdefault(name, asyncio.Lock()):
            with thawed_heap():
                yield
