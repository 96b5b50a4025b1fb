"""What one engine tells routing between its model's instances (`EngineSignals`): its load
reports, on a board of its own or, for a core shared by several frontend processes, on the
core's board that every one of them reads; and, for cache-aware routing, what its KV cache
holds, from the KV-cache events its core publishes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from app.core.kv_index import KvBlockIndex
from app.core.load_view import EngineSignals, LoadBoard
from app.core.routing import RoutingMode
from app.engine.client_slot import ClientSlot
from app.engine.kv_events import (
    SHARED_CORE_EVENTS,
    KvEventListener,
    own_events_address,
    with_kv_events,
)
from app.engine.load_report import load_reporter_factory
from app.repository.layout import ModelSpec

UNKNOWN_CAPACITY = 1 << 20
"""Blocks an index may hold where the engine did not say how many it has."""


class SignalSource:
    """Sets an engine up to publish its signals, and reads them in this process."""

    def __init__(self, spec: ModelSpec) -> None:
        self._spec = spec
        self._cache_aware = spec.routing.mode is RoutingMode.CACHE_AWARE
        self._board = LoadBoard()
        self._address = ""
        self._listener: KvEventListener | None = None

    def core_spec(self) -> ModelSpec:
        """The spec a shared core is asked for with (publishing KV events where routing
        needs them)."""
        if not self._cache_aware:
            return self._spec
        engine_args = {**self._spec.engine_args, "kv_events_config": SHARED_CORE_EVENTS}
        return dataclasses.replace(self._spec, engine_args=engine_args)

    def own_core_args(self, engine_args: dict[str, Any]) -> dict[str, Any]:
        """The arguments of a core this process starts itself."""
        if not self._cache_aware:
            return engine_args
        self._address = self._address or own_events_address()
        return with_kv_events(engine_args, self._address)

    def joined(self, slot: ClientSlot) -> None:
        """This engine is a client of a shared core: its board and events are the core's."""
        if slot.load_board:
            self._board = LoadBoard.open_file(Path(slot.load_board))
        self._address = slot.kv_events_address if self._cache_aware else ""

    def stat_logger(self) -> Callable[[Any, int], StatLoggerBase]:
        return load_reporter_factory(self._board)

    def started(self, vllm_config: Any, clients: int) -> EngineSignals:
        """The engine's signals once it runs (listening to its KV events where asked)."""
        index = None
        if self._address:
            cache = vllm_config.cache_config
            block_size = max(int(cache.block_size or 1), 1)
            index = KvBlockIndex(
                int(cache.num_gpu_blocks or UNKNOWN_CAPACITY),
                -(-self._spec.routing.tokens // block_size),
                block_size,
            )
            self._listener = KvEventListener(self._address, index)
            self._listener.start()
        return EngineSignals(self._board, index, clients)

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()
        self._board.close()
