"""vLLM's KV-cache events for cache-aware routing: the engine core publishes them over ZMQ
(`kv_events_config`), and each frontend process's client of it listens and keeps an index of
what the cache holds (app/core/kv_index.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import uuid
from typing import Any

import msgspec
import zmq
import zmq.asyncio
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch

try:
    from vllm.config.kv_events import KVEventsConfig
except ImportError:  # pragma: no cover - vLLM releases before the config package split
    from vllm.config import KVEventsConfig  # type: ignore[no-redef,unused-ignore]

from app.core.kv_index import KvBlockIndex

logger = logging.getLogger(__name__)

ENGINE_MEDIUM = "GPU"
"""vLLM's name for the engine's own KV cache (on a CPU too); other media are offload tiers."""


SHARED_CORE_EVENTS = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "core"}
"""`kv_events_config` as a frontend process asks for a shared core (app/engine/shared_core.py)
that publishes its events for routing: the core's host gives the address."""


def own_events_address() -> str:
    """A fresh address for an engine core's events, where this process starts it."""
    return f"ipc://{tempfile.gettempdir()}/tvg-kv-{uuid.uuid4().hex[:12]}"


def with_kv_events(engine_args: dict[str, Any], address: str) -> dict[str, Any]:
    """The engine arguments with KV-cache events published at `address`."""
    config = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=address)
    return {**engine_args, "kv_events_config": config}


def apply_batch(index: KvBlockIndex, batch: KVEventBatch) -> None:
    """One published batch of events, in order (fields an older vLLM lacks read as unset)."""
    for event in batch.events:
        if isinstance(event, AllBlocksCleared):
            index.cleared()
        elif not in_engine_cache(event):
            continue
        elif isinstance(event, BlockStored):
            index.stored(
                event.parent_block_hash,
                event.block_hashes,
                event.token_ids,
                event.block_size,
                getattr(event, "extra_keys", None),
            )
        elif isinstance(event, BlockRemoved):
            index.removed(event.block_hashes)


def in_engine_cache(event: Any) -> bool:
    """A block event of the engine's own cache (not an offload tier) and of its first (or
    only) group of layers."""
    medium = getattr(event, "medium", None)
    return medium in (None, ENGINE_MEDIUM) and not getattr(event, "group_idx", None)


class KvEventListener:
    """Listens to one engine core's events in this process's event loop."""

    def __init__(self, address: str, index: KvBlockIndex) -> None:
        self.address = address
        self.index = index
        self.batches = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._listen())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _listen(self) -> None:
        context = zmq.asyncio.Context.instance()
        decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        with contextlib.closing(context.socket(zmq.SUB)) as socket:
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.SUBSCRIBE, b"")
            socket.connect(self.address)
            while True:
                frames = await socket.recv_multipart()
                try:
                    apply_batch(self.index, decoder.decode(frames[-1]))
                except (msgspec.DecodeError, ValueError, TypeError):
                    logger.warning("a KV-cache event batch could not be read", exc_info=True)
                self.batches += 1
