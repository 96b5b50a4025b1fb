"""Which of a model's instances (engines) serves a request: the least loaded one, the one whose
KV cache holds most of its prompt's beginning (cache-aware: blended with the load), or the one
its prompt's leading token blocks hash to (prefix: requests that share a prefix meet its KV
cache, the same in every process with no state shared between them). Pure."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from app.core.load_view import EngineLoad
from app.errors import InvalidRequestError

PIN_HEADER = "x-triton-instance"
"""The header (gRPC metadata) that pins a request to an instance, where pinning is allowed."""
BLOCK_TOKENS = 16
"""The prefix key is made of whole blocks of this many tokens (vLLM's KV block size on GPUs)."""
BUSY_RATIO = 2
"""prefix, cache_aware: an instance is much busier only if it also holds this many times the
requests of the least loaded one."""
PREFIX_TOKENS = {"prefix": 64, "cache_aware": 512}
"""The leading tokens each mode looks at, unless the model says otherwise."""
KV_PRESSURE_FROM = 0.5
KV_PRESSURE_WEIGHT = 6.0
"""Requests waiting on an engine whose KV cache is more than half full count up to 3 times
more (at a full cache): that queue drains slowly (vLLM's own data-parallel balancing)."""


class RoutingMode(str, Enum):
    LEAST_LOADED = "least_loaded"
    CACHE_AWARE = "cache_aware"
    PREFIX = "prefix"


class LoadView(str, Enum):
    """What an instance's load is read from."""

    ENGINE = "engine"
    """The engine's own latest report (running, waiting, KV usage), the same in every frontend
    process, plus what this process sent it since; never less than this process's share."""
    PROCESS = "process"
    """The requests this frontend process admitted there (each process balances its own)."""


@dataclass(frozen=True)
class RoutingPolicy:
    """How a model's requests are spread over its instances (config.pbtxt parameters)."""

    mode: RoutingMode = RoutingMode.LEAST_LOADED
    prefix_tokens: int | None = None
    """prefix, cache_aware: how many leading tokens are looked at (None: the mode's default,
    `PREFIX_TOKENS`)."""
    busy_margin: int = 8
    """prefix, cache_aware: the instance a prompt prefers is passed over when it holds more
    than this many requests more than the least loaded one (and `BUSY_RATIO` times as many)."""
    hit_tokens: int = 16
    """cache_aware: prompt tokens an instance holds in its KV cache that outweigh one request
    more there."""
    load_view: LoadView = LoadView.ENGINE

    @property
    def tokens(self) -> int:
        """The leading tokens this policy looks at."""
        return self.prefix_tokens or PREFIX_TOKENS.get(self.mode.value, 0)


@dataclass(frozen=True)
class RouteHint:
    """What a request is routed by: its prompt (text, or token ids where the client gave
    those), its LoRA adapter, the client's pin (the header's raw value), and whether the
    model's chat template wraps the text before the engine sees it."""

    text: str = ""
    token_ids: Sequence[int] | None = None
    adapter: str | None = None
    pin: str | None = None
    chat_template: bool = False


@dataclass(frozen=True, slots=True)
class InstanceView:
    """What routing knows of one ready instance when a request comes."""

    admitted: int
    """Requests this process admitted there, still running."""
    report: EngineLoad | None = None
    """The engine's latest load report (None: none yet, or not read)."""
    pending: int = 0
    """Requests this process sent there since that report."""
    clients: int = 1
    """Frontend processes sharing the engine."""
    cached_tokens: int = 0
    """Of the request's leading tokens, how many the engine's KV cache holds."""


def load_score(view: InstanceView) -> float:
    """An instance's load in requests: the engine's report plus what this process sent since,
    never less than this process's share times the processes sharing it; waiting requests
    count more on an engine whose KV cache is filling up."""
    share = float(view.admitted * view.clients)
    report = view.report
    if report is None:
        return share
    score = max(share, float(report.running + report.waiting + view.pending))
    waiting = report.waiting + view.pending if report.waiting else 0
    pressure = max(0.0, report.kv_usage - KV_PRESSURE_FROM)
    return score + waiting * KV_PRESSURE_WEIGHT * pressure


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

    def choose(
        self,
        loads: Mapping[int, float],
        key: bytes | None = None,
        cached: Mapping[int, int] | None = None,
    ) -> int:
        """An instance of `loads` (ready instance index -> its load, `load_score`): the one
        `key` hashes to (prefix mode) unless it is much busier; the one whose load less its
        cached tokens (`cached`, cache-aware mode) is lowest among those not much busier; else
        the least loaded."""
        least = min(loads.values())
        if self.policy.mode is RoutingMode.PREFIX and key is not None:
            preferred = rendezvous(key, sorted(loads))
            if not self.much_busier(loads[preferred], least):
                return preferred
        if self.policy.mode is RoutingMode.CACHE_AWARE and cached:
            costs = self.costs(loads, cached)
            return self.least_loaded(
                {i: cost for i, cost in costs.items() if not self.much_busier(loads[i], least)}
            )
        return self.least_loaded(loads)

    def costs(self, loads: Mapping[int, float], cached: Mapping[int, int]) -> dict[int, float]:
        """cache_aware: each instance's load, less a request for every `hit_tokens` of the
        prompt its KV cache holds."""
        return {
            index: load - cached.get(index, 0) / self.policy.hit_tokens
            for index, load in loads.items()
        }

    def least_loaded(self, loads: Mapping[int, float]) -> int:
        """The instance with the lowest load; ties broken round-robin."""
        fewest = min(loads.values())
        tied = sorted(index for index, load in loads.items() if load == fewest)
        return tied[next(self._turn) % len(tied)]

    def much_busier(self, load: float, least: float) -> bool:
        return load - least > self.policy.busy_margin and load > BUSY_RATIO * least
