"""What one engine's KV cache holds, from the KV-cache events it publishes (vLLM's
BlockStored, BlockRemoved, AllBlocksCleared), for cache-aware routing.

Blocks are matched by their tokens, not by the engine's own block hashes (whose algorithm and
seed depend on the vLLM release and its settings): each stored block gets a key chained from
its parent's key, its tokens and its extra keys (the LoRA adapter), computed the same way from
a request's prompt tokens. Only the first `depth` blocks of a sequence are kept (what routing
looks at), and never more than `capacity` (the engine's block count): the oldest go first.
A request routed to the engine is expected to leave its leading blocks there (`expect`): until
the engine's events say so (its prefill takes a step or more) or `EXPECTED_SECONDS` pass, they
count as held, so that the requests sharing a prefix that arrive meanwhile follow it. Pure;
the keys are Python hashes, the same within one process; the clock is given."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

ROOT_KEY = 0
"""The parent key of a sequence's first block."""
EXPECTED_SECONDS = 30.0
"""How long the blocks of a request routed to the engine count as held without its events."""


def block_key(parent: int, tokens: Sequence[int], extra: Hashable | None) -> int:
    return hash((parent, tuple(tokens), extra))


def frozen(value: Any) -> Hashable:
    """An event's extra keys as a hashable value (lists, as msgpack gives them, as tuples)."""
    if isinstance(value, (list, tuple)):
        return tuple(frozen(item) for item in value)
    return value  # type: ignore[no-any-return]


def request_extra(adapter: str | None) -> Hashable | None:
    """The extra keys of a request's blocks, as the engine publishes them: the adapter's name."""
    return (adapter,) if adapter else None


def prompt_keys(
    tokens: Sequence[int], block_size: int, adapter: str | None, limit: int
) -> list[int]:
    """The keys of the prompt's leading whole blocks (at most `limit` blocks)."""
    extra = request_extra(adapter)
    keys: list[int] = []
    parent = ROOT_KEY
    for start in range(0, min(len(tokens) // block_size, limit) * block_size, block_size):
        parent = block_key(parent, tokens[start : start + block_size], extra)
        keys.append(parent)
    return keys


class KvBlockIndex:
    """The leading blocks one engine's KV cache holds, by key."""

    def __init__(self, capacity: int, depth: int, block_size: int = 0) -> None:
        self.capacity = max(capacity, 1)
        self.depth = depth
        self.block_size = block_size
        """The engine's block size in tokens (0: unknown until its first stored block)."""
        self._blocks: OrderedDict[Hashable, list[int]] = OrderedDict()
        """The engine's block hash -> [key, depth, copies]."""
        self._keys: dict[int, int] = {}
        """key -> how many of the engine's blocks have it."""
        self._expected: OrderedDict[int, float] = OrderedDict()
        """key -> until when it counts as held (a request routed here will store it)."""

    def __len__(self) -> int:
        return len(self._blocks)

    def stored(
        self,
        parent: Hashable | None,
        hashes: Sequence[Hashable],
        token_ids: Sequence[int],
        block_size: int,
        extra_keys: Sequence[Any] | None = None,
    ) -> None:
        """Blocks the engine filled, a chain following `parent` (None: a sequence's first)."""
        if parent is None:
            key, depth = ROOT_KEY, 0
        elif (known := self._blocks.get(parent)) is not None:
            key, depth = known[0], known[1]
        else:
            return  # deeper than kept, or stored before this index listened
        self.block_size = block_size
        room = min(len(hashes), self.depth - depth, len(token_ids) // block_size)
        for number in range(room):
            tokens = token_ids[number * block_size : (number + 1) * block_size]
            extra = frozen(extra_keys[number]) if extra_keys else None
            key = block_key(key, tokens, extra or None)
            self._add(hashes[number], key, depth + number + 1)

    def removed(self, hashes: Sequence[Hashable]) -> None:
        for block in hashes:
            entry = self._blocks.get(block)
            if entry is None:
                continue
            entry[2] -= 1
            if entry[2] <= 0:
                del self._blocks[block]
                self._forget(entry[0])

    def cleared(self) -> None:
        self._blocks.clear()
        self._keys.clear()
        self._expected.clear()

    def expect(self, keys: Sequence[int], now: float) -> None:
        """A request with these leading keys was routed to the engine at `now`."""
        until = now + EXPECTED_SECONDS
        for key in keys:
            if key not in self._keys:
                self._expected[key] = until
                self._expected.move_to_end(key)
        while len(self._expected) > self.capacity:
            self._expected.popitem(last=False)

    def match(self, keys: Sequence[int], now: float = 0.0) -> int:
        """How many of `keys` (a prompt's, in order) the cache holds, or is expected to hold
        at `now`, from the first on."""
        held = 0
        for key in keys:
            if key not in self._keys and self._expected.get(key, 0.0) <= now:
                break
            held += 1
        return held

    def _add(self, block: Hashable, key: int, depth: int) -> None:
        entry = self._blocks.get(block)
        if entry is not None:
            entry[2] += 1
            return
        self._blocks[block] = [key, depth, 1]
        self._keys[key] = self._keys.get(key, 0) + 1
        self._expected.pop(key, None)
        while len(self._blocks) > self.capacity:
            _, oldest = self._blocks.popitem(last=False)
            self._forget(oldest[0])

    def _forget(self, key: int) -> None:
        count = self._keys.get(key, 0) - 1
        if count > 0:
            self._keys[key] = count
        else:
            self._keys.pop(key, None)
