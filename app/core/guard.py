"""One admitted request, and the core's one loop over an engine's outputs: each observed,
timed, bounded by the request's deadline and its errors classified. The generation
service runs the streams it starts itself through it (Triton HTTP, SSE, gRPC), and a
library's serving code (OpenAI) the engine streams it starts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from app.core.limits import RequestLimits, check_limits, check_sampling
from app.core.routing import RouteHint
from app.core.timing import EngineTimeline, RequestTiming
from app.core.types import GenerationChunk, GenerationObserver, InferenceEngine, ServingModel
from app.errors import RequestTimeoutError, ServerError

T = TypeVar("T")


def no_timeline(output: Any) -> EngineTimeline | None:
    return None


@dataclass(frozen=True, slots=True)
class OutputReading(Generic[T]):
    """How the loop reads one engine output."""

    token_counts: Callable[[T], tuple[int, int]]
    """Its (prompt tokens, new tokens), for the observer."""
    timeline: Callable[[T], EngineTimeline | None] = no_timeline
    """The engine's timeline of the request (from its final output; None from the others)."""
    finished: Callable[[T], bool] | None = None
    """Whether it is the request's last (its response complete once it was handed on); None:
    the end of the request says so."""


def chunk_token_counts(chunk: GenerationChunk) -> tuple[int, int]:
    return chunk.num_prompt_tokens, sum(c.num_tokens for c in chunk.completions)


def chunk_timeline(chunk: GenerationChunk) -> EngineTimeline | None:
    return chunk.timeline


def chunk_finished(chunk: GenerationChunk) -> bool:
    return chunk.finished


CHUNKS: OutputReading[GenerationChunk] = OutputReading(
    chunk_token_counts, chunk_timeline, chunk_finished
)
"""The core's own chunks."""


@dataclass
class RequestGuard:
    """One admitted request: every engine stream it runs goes through `stream`."""

    request_id: str
    limits: RequestLimits
    observer: GenerationObserver | None = None
    timeout_seconds: float | None = None
    started: float = field(default_factory=time.monotonic)
    """When its deadline started (its admission)."""
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

    @asynccontextmanager
    async def admitted(
        self, model: ServingModel, route: RouteHint | None
    ) -> AsyncIterator[InferenceEngine]:
        """Hold the request's place in `model` (on the engine `route` leads to) while it runs;
        its deadline starts now."""
        async with model.admit(self.request_id, route) as engine:
            self.engine, self.started = engine, time.monotonic()
            if self.timing is not None:
                self.timing.admitted()
            yield engine

    async def stream(
        self,
        outputs: AsyncGenerator[T, None],
        reading: OutputReading[T],
        quiet: bool = False,
        responds: bool = True,
        on_start: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> AsyncGenerator[T, None]:
        """`outputs`, each one observed and timed, ended with `RequestTimeoutError` at the
        request's deadline (or, `quiet`, just ended: the caller reports `failure` itself);
        closing this (or the deadline) closes `outputs`, which aborts them. Each output is
        a response handed on (`responds`), or a part of one the caller makes of them.
        `on_start` and `on_end` run when the stream starts (its first `anext`) and ends."""
        if on_start is not None:
            on_start()
        if self.timeout_seconds is not None:
            outputs = with_deadline(outputs, self.timeout_seconds, self.started)
        observer, timing, finished = self.observer, self.timing, reading.finished
        try:
            async for output in outputs:
                if observer is not None:
                    observer.record_chunk(*reading.token_counts(output))
                if timing is not None:
                    timing.chunk()
                    timing.engine_reported(reading.timeline(output))
                if not responds:
                    yield output
                    continue
                handed = self.responding(None if finished is None else finished(output))
                yield output
                self.held(handed)
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

    def responding(self, complete: bool | None = None) -> int:
        """A response is handed to the frontend now (the whole response with it, `complete`,
        where known); returns the time, for `held`."""
        if self.timing is not None:
            self.timing.responded()
            if complete is not None:
                self.timing.complete = complete
        return time.monotonic_ns()

    def held(self, since: int) -> None:
        """The frontend is back for more: it held the response since `since`."""
        if self.timing is not None:
            self.timing.held_ns += time.monotonic_ns() - since


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
