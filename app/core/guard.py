"""The bounds of one admitted request around engine streams that a frontend starts itself:
limits, observation and deadline, as `GenerationService.generate` applies them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.core.limits import RequestLimits, check_limits, check_sampling
from app.core.timing import EngineTimeline, RequestTiming
from app.core.types import GenerationObserver, InferenceEngine
from app.errors import RequestTimeoutError, ServerError

T = TypeVar("T")

TokenCounts = Callable[[T], tuple[int, int]]
"""An engine output's (prompt tokens, new tokens), for the observer."""
TimelineOf = Callable[[T], EngineTimeline | None]
"""The engine's timeline of a request, from its final output (None from the others)."""


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
    timing: RequestTiming | None = None
    engine_error: Exception | None = None
    """An error one of the request's engine streams raised (the library may answer it)."""
    engine: InferenceEngine | None = None
    """The engine (the model's instance) the request was routed to."""

    def check_limits(
        self, n: int | None, max_tokens: int | None, max_tokens_field: str = "max_tokens"
    ) -> None:
        """Refuse, naming the field, an `n` or `max_tokens` above the server's limits."""
        check_limits(
            {max_tokens_field: (max_tokens, self.limits.max_tokens), "n": (n, self.limits.max_n)}
        )

    def check_sampling(
        self, sampling: dict[str, Any], max_tokens_field: str = "max_tokens"
    ) -> None:
        """Refuse, naming the field, any sampling value above the server's limits (`n`,
        `max_tokens`, stop strings, token-id lists): O(1) per field, before any work."""
        check_sampling(sampling, self.limits, max_tokens_field=max_tokens_field)

    async def stream(
        self,
        outputs: AsyncGenerator[T, None],
        token_counts: TokenCounts[T],
        quiet: bool = False,
        on_start: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
        timeline: TimelineOf[T] | None = None,
    ) -> AsyncGenerator[T, None]:
        """`outputs`, each one observed, ended with `RequestTimeoutError` at the request's
        deadline (or, `quiet`, just ended: the caller reports `failure` itself); closing this
        (or the deadline) closes `outputs`, which aborts them. `on_start` and `on_end` run
        when the stream starts (its first `anext`) and ends; `timeline` reads the engine's
        timeline of each output for the request's timing."""
        if on_start is not None:
            on_start()
        if self.timeout_seconds is not None:
            outputs = with_deadline(outputs, self.timeout_seconds, self.started)
        try:
            async for output in outputs:
                if self.observer is not None:
                    self.observer.record_chunk(*token_counts(output))
                if self.timing is not None:
                    self.timing.chunk()
                    self.timing.responded()
                    if timeline is not None:
                        self.timing.engine_reported(timeline(output))
                yield output
        except ServerError as exc:
            self.failure = exc
            if not quiet:
                raise
        except Exception as exc:
            self.engine_error = exc
            raise
        finally:
            await outputs.aclose()
            if on_end is not None:
                on_end()


async def with_deadline(
    chunks: AsyncGenerator[T, None], seconds: float, started: float | None = None
) -> AsyncGenerator[T, None]:
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
                raise RequestTimeoutError(
                    f"Request timed out after {seconds:g} s and was aborted"
                ) from None
            yield chunk
    finally:
        await chunks.aclose()
