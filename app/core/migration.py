"""Requests that outlive their engine: what a request produced so far, and how it resumes on
the engine that replaced a dead one (the engine adapter re-submits it; supervision hands the
replacement over)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class EngineHandover(Protocol):
    """Who replaces a model version's failed engine (app/repository/supervision.py)."""

    async def replacement(self, failed: Any) -> Any | None:
        """The engine that replaced `failed`, once it is ready to serve; None when there will
        be none in time (restarts exhausted or off, the model unloading, the wait bounded by
        the policy over)."""
        ...

    def count_migration(self) -> None:
        """One request moved on to a replacement engine."""
        ...


@runtime_checkable
class MigratableEngine(Protocol):
    """An engine whose running requests can move on to its replacement when it dies."""

    handover: EngineHandover | None


@dataclass
class CompletionProgress:
    """What one of a request's `n` completions produced, as its client saw it."""

    token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    cumulative_logprob: float | None = None
    logprob_base: float = 0.0
    """The cumulative logprob of the tokens produced before the latest resume."""


@dataclass(frozen=True)
class Resumption:
    """One engine request that continues a completion: its prompt is the request's prompt
    followed by `token_ids`; it may produce `max_tokens` more."""

    index: int
    token_ids: list[int]
    max_tokens: int | None
    min_tokens: int
    seed: int | None


class RequestProgress:
    """The bookkeeping of one request's completions, for resuming it on another engine.

    A request resumes from the tokens its client received: each unfinished completion goes
    on as its own request (prompt + its tokens, the tokens it has left, the same sampling
    settings, the seed offset by the tokens produced). It resumes once: a request that was
    running at each of two engine deaths in a row may be what kills the engine, and ends with
    an error instead of meeting the next replacement.
    """

    def __init__(
        self, n: int, max_tokens: int | None, min_tokens: int = 0, seed: int | None = None
    ) -> None:
        self.completions = [CompletionProgress() for _ in range(n)]
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.seed = seed
        self.prompt_token_ids: list[int] | None = None
        self.resumes = 0

    @property
    def produced(self) -> int:
        return sum(len(c.token_ids) for c in self.completions)

    @property
    def finished(self) -> bool:
        return all(c.finished for c in self.completions)

    def record(
        self, index: int, token_ids: Sequence[int], cumulative_logprob: float | None, finished: bool
    ) -> float | None:
        """Note what completion `index` produced in one step; return its cumulative logprob
        counted from the request's start (the resumed request counts from its own)."""
        completion = self.completions[index]
        completion.token_ids.extend(token_ids)
        completion.finished = completion.finished or finished
        if cumulative_logprob is not None:
            completion.cumulative_logprob = completion.logprob_base + cumulative_logprob
        return completion.cumulative_logprob

    def can_resume(self) -> bool:
        """False once the request has resumed: the engine died on it twice."""
        return self.resumes == 0

    def restarts_whole(self) -> bool:
        """Nothing was produced yet: the request starts again exactly as it was given."""
        return self.produced == 0

    def resumptions(self) -> list[Resumption]:
        """The engine requests that continue the unfinished completions (each with n = 1)."""
        return [
            Resumption(
                index=index,
                token_ids=list(completion.token_ids),
                max_tokens=None
                if self.max_tokens is None
                else self.max_tokens - len(completion.token_ids),
                min_tokens=max(self.min_tokens - len(completion.token_ids), 0),
                seed=None if self.seed is None else self.seed + len(completion.token_ids),
            )
            for index, completion in enumerate(self.completions)
            if not completion.finished
        ]

    def resumed(self) -> None:
        """The request moved on to another engine."""
        self.resumes += 1
        for completion in self.completions:
            completion.logprob_base = completion.cumulative_logprob or 0.0
