"""Triton's poll mode: the repository folder decides what is served. Models whose folders
appear or change are (re)loaded (a changed model keeps serving until its new engines are
ready), models whose folders disappear are unloaded."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Collection
from pathlib import Path

from app.core.cancelling import cancel_and_wait
from app.repository.registry import ModelRegistry

logger = logging.getLogger(__name__)

FolderState = frozenset[tuple[str, int, int]]
"""A model folder's files: (relative path, size, modification time in ns) of each."""


def folder_state(folder: Path) -> FolderState:
    """What a change to any file of `folder` (added, removed, rewritten) changes."""
    entries = set()
    for directory, _, files in os.walk(folder):
        for name in files:
            path = Path(directory, name)
            try:
                stat = path.stat()
            except OSError:
                continue
            entries.add((str(path.relative_to(folder)), stat.st_size, stat.st_mtime_ns))
    return frozenset(entries)


def repository_state(
    folders: dict[str, Path], watched: Collection[str] | None
) -> dict[str, FolderState]:
    """Each model folder of the repositories (those in `watched`, if given) and its state."""
    return {
        name: folder_state(folder)
        for name, folder in sorted(folders.items())
        if watched is None or name in watched
    }


class RepositoryPoller:
    """Looks at the repository every `interval` seconds and brings the registry in line."""

    def __init__(
        self, registry: ModelRegistry, interval: float, watched: Collection[str] | None = None
    ) -> None:
        self._registry = registry
        self._interval = interval
        self._watched = watched
        self._seen: dict[str, FolderState] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Take the repository as the start-up loaded it, then poll in the background."""
        self._seen = await self._look()
        self._task = asyncio.create_task(self._run(), name="repository-poll")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _run(self) -> None:
        """Poll every interval until the server drains (Triton's polling ends with its exit)."""
        while True:
            await asyncio.sleep(self._interval)
            if self._registry.draining:
                return
            try:
                await self.poll()
            except Exception:
                logger.exception("polling the model repository failed")

    async def _look(self) -> dict[str, FolderState]:
        def look() -> dict[str, FolderState]:
            return repository_state(self._registry.model_folders(), self._watched)

        return await asyncio.to_thread(look)

    async def poll(self) -> None:
        """One look: load what appeared or changed, unload what disappeared."""
        now = await self._look()
        seen, self._seen = self._seen, now
        for name in sorted(now):
            if now[name] != seen.get(name):
                await self._apply("loading", name, self._registry.load(name))
        loaded = {served.name for served in self._registry}
        for name in sorted(set(seen) - set(now)):
            if name in loaded:
                await self._apply("unloading", name, self._registry.unload(name))

    async def _apply(self, action: str, name: str, change: Awaitable[None]) -> None:
        logger.info("repository poll: %s model '%s'", action, name)
        try:
            await change
        except Exception as exc:  # noqa: BLE001 - reported; the next poll tries again
            logger.error("repository poll: %s model '%s' failed: %s", action, name, exc)
