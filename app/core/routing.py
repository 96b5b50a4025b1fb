"""Which of a model's instances (engines) serves a request: the least loaded one, or the one
its prompt's leading token blocks hash to (prefix-aware: requests that share a prefix meet
its KV cache). Pure: the same prompt routes the same way in every process, with no state
shared between them."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from app.errors import InvalidRequestError

PIN_HEADER = "x-triton-instance"
"""The header (gRPC metadata) that pins a request to an instance, where pinning is allowed."""
BLOCK_TOKENS = 16
"""The prefix key is made of whole blocks of this many tokens (vLLM's KV block size on GPUs)."""
BUSY_RATIO = 2
"""prefix: the preferred instance is much busier only if it also holds this many times the
requests of the least loaded one."""


class RoutingMode(str, Enum):
    LEAST_LOADED = "least_loaded"
    PREFIX = "prefix"


@dataclass(frozen=True)
class RoutingPolicy:
    """How a model's requests are spread over its instances (config.pbtxt parameters)."""

    mode: RoutingMode = RoutingMode.LEAST_LOADED
    prefix_tokens: int = 64
    """prefix: how many leading tokens (whole blocks of `BLOCK_TOKENS`) make the key."""
    busy_margin: int = 8
    """prefix: the preferred instance is passed over for the least loaded one when it holds
    more than this many requests more than that one (and `BUSY_RATIO` times as many)."""


@dataclass(frozen=True)
class RouteHint:
    """What a request is routed by: its prompt (text, or token ids where the client gave
    those), its LoRA adapter, and the client's pin (the header's raw value)."""

    text: str = ""
    token_ids: Sequence[int] | None = None
    adapter: str | None = None
    pin: str | None = None


def prefix_key(tokens: Sequence[int], adapter: str | None, limit: int) -> bytes | None:
    """The routing key of a prompt: its leading whole blocks (at most `limit` tokens) and the
    adapter's name; None when there is neither (nothing a cache could share)."""
    count = min(len(tokens), limit) // BLOCK_TOKENS * BLOCK_TOKENS
    if not count and adapter is None:
        return None
    text = f"{adapter or ''}\0{','.join(map(str, tokens[:count]))}"
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def rendezvous(key: bytes, indexes: Sequence[int]) -> int:
    """The instance `key` belongs to among `indexes` (highest random weight): the same in
    every process, and only the keys of an instance that goes away move."""
    return max(
        indexes,
        key=lambda index: hashlib.blake2b(
            key + index.to_bytes(4, "little"), digest_size=8
        ).digest(),
    )


def pinned_index(value: str, count: int, model: str) -> int:
    """The instance a pin header names, or a 400 naming the header."""
    text = value.strip()
    if not text.isdigit() or int(text) >= count:
        raise InvalidRequestError(
            f"{PIN_HEADER}: model '{model}' has instances 0 to {count - 1}, got '{value[:32]}'",
            param=PIN_HEADER,
        )
    return int(text)


class InstanceRouter:
    """Chooses a model's instance for each request among the ready ones; it keeps only the
    turn that breaks ties between equally loaded instances."""

    def __init__(self, policy: RoutingPolicy) -> None:
        self.policy = policy
        self._turn = itertools.count()

    def choose(self, loads: Mapping[int, int], key: bytes | None = None) -> int:
        """An instance of `loads` (ready instance index -> requests admitted to it): the one
        `key` hashes to (prefix mode) unless it is much busier, else the least loaded."""
        if self.policy.mode is RoutingMode.PREFIX and key is not None:
            preferred = rendezvous(key, sorted(loads))
            if not self.much_busier(loads[preferred], min(loads.values())):
                return preferred
        return self.least_loaded(loads)

    def least_loaded(self, loads: Mapping[int, int]) -> int:
        """The instance with the fewest requests; ties broken round-robin."""
        fewest = min(loads.values())
        tied = sorted(index for index, load in loads.items() if load == fewest)
        return tied[next(self._turn) % len(tied)]

    def much_busier(self, load: int, least: int) -> bool:
        return load - least > self.policy.busy_margin and load > BUSY_RATIO * least
