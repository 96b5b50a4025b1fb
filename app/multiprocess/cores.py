"""The supervisor's engine cores: one per model version, load and instance, each serving one
client slot per frontend process. A core accepts each client once, so a frontend process
asking again for a slot it already used (its engine restarted) gets a fresh core; the others'
clients are told the old core is gone (vLLM's own notice) and their engines restart onto the
new one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

CoreKey = tuple[str, str, str, str]
"""(model, version, load, instance): a load (or reload) of a model version gets its own cores,
one per instance."""


class CoreHost(Protocol):
    """What the supervisor needs of one running engine core (`EngineCoreHost`)."""

    slots: list[Any]

    def launch(self) -> None: ...

    def wait_until_dead(self) -> None: ...

    def notify_dead(self) -> None: ...

    def stop(self) -> None: ...


HostFactory = Callable[[CoreKey, dict[str, Any], dict[str, Any], int, Path], CoreHost]
"""(key, engine_args, instance, clients, run_dir) -> a core host not yet launched; `instance`:
where its processes run (`ModelInstance.to_json`)."""


@dataclass
class CoreEntry:
    """The current core of one key, and which frontend processes took or gave back their
    slot."""

    host: CoreHost | None = None
    epoch: int = 0
    handed: set[int] = field(default_factory=set)
    released: set[int] = field(default_factory=set)
    alive: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    watch: asyncio.Task[None] | None = None


class EngineCores:
    """Launches, watches, replaces and stops the engine cores of `frontend_processes`
    processes (each core has a client slot for every one)."""

    def __init__(self, frontend_processes: int, run_dir: Path, make_host: HostFactory) -> None:
        self._frontend_processes = frontend_processes
        self._run_dir = run_dir
        self._make_host = make_host
        self._entries: dict[CoreKey, CoreEntry] = {}

    async def acquire(
        self,
        key: CoreKey,
        engine_args: dict[str, Any],
        frontend_process: int,
        instance: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Frontend process `frontend_process`'s slot of the key's running core, launching a
        core first (placed as `instance` says) when there is none, it died, or this process
        already used its slot."""
        entry = self._entries.setdefault(key, CoreEntry())
        async with entry.lock:
            if entry.host is None or not entry.alive or frontend_process in entry.handed:
                await self._replace(key, entry, engine_args, instance or {})
            assert entry.host is not None
            entry.handed.add(frontend_process)
            entry.released.discard(frontend_process)
            slot = entry.host.slots[frontend_process]
            return {"epoch": entry.epoch, **vars(slot)}

    async def release(self, key: CoreKey, epoch: int, frontend_process: int) -> None:
        """A frontend process's engine on the core of `epoch` stopped; the core stops once no
        frontend process uses it any more."""
        entry = self._entries.get(key)
        if entry is None or entry.epoch != epoch:
            return
        async with entry.lock:
            if entry.epoch != epoch:  # a fresh core launched while this waited for the lock
                return
            entry.released.add(frontend_process)
            if entry.handed <= entry.released:
                await self._stop(entry)
                self._entries.pop(key, None)

    async def stop_all(self) -> None:
        for entry in list(self._entries.values()):
            await self._stop(entry)
        self._entries.clear()

    async def _replace(
        self,
        key: CoreKey,
        entry: CoreEntry,
        engine_args: dict[str, Any],
        instance: dict[str, Any],
    ) -> None:
        if entry.host is not None:
            logger.info(
                "model '%s' version %s: starting a fresh engine core for the frontends",
                key[0],
                key[1],
            )
            await self._stop(entry)
        host = self._make_host(key, engine_args, instance, self._frontend_processes, self._run_dir)
        await asyncio.to_thread(host.launch)
        entry.host, entry.alive = host, True
        entry.epoch += 1
        entry.handed, entry.released = set(), set()
        entry.watch = asyncio.create_task(self._watch(key, entry, host))

    async def _watch(self, key: CoreKey, entry: CoreEntry, host: CoreHost) -> None:
        await asyncio.to_thread(host.wait_until_dead)
        if entry.host is host and entry.alive:
            logger.error(
                "model '%s' version %s: the engine core died; telling its frontends", key[0], key[1]
            )
            entry.alive = False
            await asyncio.to_thread(host.notify_dead)

    async def _stop(self, entry: CoreEntry) -> None:
        host, entry.host, entry.alive = entry.host, None, False
        if host is None:
            return
        await asyncio.to_thread(host.notify_dead)
        await asyncio.to_thread(host.stop)
        if entry.watch is not None:
            await asyncio.gather(entry.watch, return_exceptions=True)
