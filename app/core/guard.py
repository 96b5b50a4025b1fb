"""The bounds of one admitted request around engine streams that a frontend starts itself:
limits, observation and deadline, as `GenerationService.generate` applies them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from app.core.limits import RequestLimits, check_limits
from app.core.types import GenerationObserver
from app.errors import RequestTimeoutError, ServerError

T = TypeVar("T")

TokenCounts = Callable[[T], tuple[int, int]]
"""An engine output's (prompt tokens, new tokens), for the observer."""


@dataclass
class RequestGuard:
    """One admitted request: every engine stream it runs goes through `stream`."""

    request_id: str
    limits: RequestLimits
    observer: GenerationObserver | None = None
    timeout_seconds: float | None = None
    started: float = field(default_factory=time.monotonic)
    failure: ServerError | None = None
    """Why the core ended one of the request's streams early (its deadline), if it did."""

    def check_limits(self, n: int | None, max_tokens: int | None, max_tokens_field: str = "max_tokens") -> None:
        """Refuse, naming the field, an `n` or `max_tokens` above the server's limits."""
        check_limits({max_tokens_field: (max_tokens, self.limits.max_tokens), "n": (n, self.limits.max_n)})

    async def stream(
        self,
        outputs: AsyncIterator[T],
        token_counts: TokenCounts[T],
        quiet: bool = False,
        on_start: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> AsyncIterator[T]:
        """`outputs`, each one observed, ended with `RequestTimeoutError` at the request's
        deadline (or, `quiet`, just ended: the caller reports `failure` itself); closing this
        (or the deadline) closes `outputs`, which aborts them. `on_start` and `on_end` run
        when the stream starts (its first `anext`) and ends."""
        if on_start is not None:
            on_start()
        if self.timeout_seconds is not None:
            outputs = with_deadline(outputs, self.timeout_seconds, self.started)
        try:
            async for output in outputs:
                if self.observer is not None:
                    self.observer.record_chunk(*token_counts(output))
                yield output
        except ServerError as exc:
            self.failure = exc
            if not quiet:
                raise
        finally:
            await outputs.aclose()  # type: ignore[attr-defined]
            if on_end is not None:
                on_end()


async def with_deadline(chunks: AsyncIterator[T], seconds: float, started: float | None = None) -> AsyncIterator[T]:
    """Abort (by closing the engine iterator) when the request, started at `started`
    (`time.monotonic()`; default now), runs past `seconds`."""
    deadline = (time.monotonic() if started is None else started) + seconds
    try:
        while True:
            remaining = deadline - time.monotonic()
            try:
                chunk = await asyncio.wait_for(anext(chunks), max(remaining, 0))
            except StopAsyncIteration:
                return
            except asyncio.TimeoutError:
                raise RequestTimeoutError(f"Request timed out after {seconds:g} s and was aborted") from None
            yield chunk
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
