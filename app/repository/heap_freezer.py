"""Keeps the start-up heap out of Python's full collections, as vLLM's API server does
(`vllm.utils.gc_utils.freeze_gc_heap`): once the engines are loaded, what survives a
collection is frozen, so that a generation-2 collection while serving no longer scans the
hundreds of thousands of objects of torch, vLLM and the tokenizers (a pause of every stream).

Frozen objects are never collected, so a repository change (load, unload, reload, an
engine restart) thaws the heap while it runs: the stopped engine's reference cycles are
then collected. The last change to end freezes the heap again."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

logger = logging.getLogger(__name__)


class HeapFreezer:
    """The heap of this process, frozen between repository changes once start-up froze it
    (the collector is one per process: so is this, `HEAP`)."""

    def __init__(self) -> None:
        self._armed = False
        self._changes = 0

    @property
    def frozen(self) -> bool:
        """True while the heap is kept frozen: after start-up, between changes."""
        return self._armed and not self._changes

    def freeze(self) -> None:
        """Keep the heap frozen from now on: collect every generation, then freeze the
        survivors (or, while a change runs, once the last one ends)."""
        self._armed = True
        started = time.perf_counter()
        self._refreeze()
        if self.frozen:
            logger.info(
                "heap frozen: %d objects that full collections skip (%.2f s)",
                gc.get_freeze_count(),
                time.perf_counter() - started,
            )

    def release(self) -> None:
        """Thaw the heap for good (the server stops)."""
        self._armed = False
        gc.unfreeze()

    @contextmanager
    def thawed(self) -> Iterator[None]:
        """The heap thawed for a repository change, frozen again once the last one ends."""
        if self._armed:
            gc.unfreeze()
        self._changes += 1
        try:
            yield
        finally:
            self._changes -= 1
            self._refreeze()

    def _refreeze(self) -> None:
        if self.frozen:
            for generation in range(3):
                gc.collect(generation)
            gc.freeze()


HEAP = HeapFreezer()


def freeze_heap() -> None:
    """At the end of start-up: collect, then keep the heap frozen between repository changes."""
    HEAP.freeze()


def release_heap() -> None:
    """At shutdown: thaw the heap for good."""
    HEAP.release()


def thawed_heap() -> AbstractContextManager[None]:
    """Around a repository change: the heap thawed, frozen again once the last change ends
    (if start-up froze it)."""
    return HEAP.thawed()
