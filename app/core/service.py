"""The generation service: every frontend's one call into the engines."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager, contextmanager

from app.core.chunks import merge_chunks
from app.core.guard import CHUNKS, RequestGuard
from app.core.limits import RequestLimits, check_context
from app.core.routing import RouteHint
from app.core.timing import RequestTiming, StatisticsRecorder
from app.core.types import (
    GenerationChunk,
    GenerationObserver,
    InferenceEngine,
    ServingModel,
    ValidRequest,
)


class GenerationService:
    """Admits a valid request to a model, runs it on the model's engine and yields its
    outputs: a delta chunk per engine step when `request.stream`, else exactly one chunk
    with the whole output. Frontends only format what it yields."""

    def __init__(
        self,
        limits: RequestLimits | None = None,
        timeout_seconds: float | None = None,
        statistics: StatisticsRecorder | None = None,
    ) -> None:
        self.limits = limits or RequestLimits()
        self.timeout_seconds = timeout_seconds
        self.statistics = statistics

    async def stream(
        self,
        model: ServingModel,
        request: ValidRequest,
        observer: GenerationObserver | None = None,
    ) -> AsyncGenerator[GenerationChunk, None]:
        """The request's chunks: admitted, run on the engine it was routed to, recorded.
        Errors before the first chunk (admission, the engine refusing a parameter) are
        raised from the first `anext`; closing the iterator aborts the engine request."""
        timing, guard = self._guard(model, request.request_id, observer, request.timeout_seconds)
        collected: list[GenerationChunk] = []
        with self._recording(timing, guard):
            async with guard.admitted(model, request.route()) as engine:
                chunks = self._start(engine, request)
                outputs = guard.stream(chunks, CHUNKS, responds=request.stream)
                async with aclosing(outputs):  # closing this closes (aborts) the engine's
                    async for chunk in outputs:
                        if request.stream:
                            yield chunk
                        else:
                            collected.append(chunk)
            if not request.stream:  # after admission: an aborted request raises there
                merged = merge_chunks(collected, request.n)
                handed = guard.responding(complete=True)
                yield merged
                guard.held(handed)
            timing.complete = True

    @asynccontextmanager
    async def admission(
        self,
        model: ServingModel,
        request_id: str,
        observer: GenerationObserver | None = None,
        route: RouteHint | None = None,
    ) -> AsyncIterator[RequestGuard]:
        """Admit a request whose engine streams the frontend starts itself (through a library's
        serving code) on the engine `route` leads to (`guard.engine`): the guard checks its
        limits and runs each stream through the core's loop (`guard.stream`), as `stream`
        runs its own."""
        timing, guard = self._guard(model, request_id, observer)
        with self._recording(timing, guard):
            async with guard.admitted(model, route):
                yield guard
            timing.responded()
            timing.complete = True

    def _guard(
        self,
        model: ServingModel,
        request_id: str,
        observer: GenerationObserver | None,
        client_timeout: float | None = None,
    ) -> tuple[RequestTiming, RequestGuard]:
        """A request's timing, and its guard with the server's limits and deadline: the
        server's timeout, or the client's where that is sooner."""
        timing = RequestTiming(model.name, model.version, client_id(observer, request_id))
        timeout = sooner(self.timeout_seconds, client_timeout)
        guard = RequestGuard(request_id, self.limits, observer, timeout, timing=timing)
        return timing, guard

    @contextmanager
    def _recording(self, timing: RequestTiming, guard: RequestGuard) -> Iterator[None]:
        """Record the request's statistics when it ends: an error is a failure (one of its
        streams' too), and so is a request closed before its response was complete (the
        client went away: Triton's cancellation)."""
        try:
            yield
        except Exception as exc:
            timing.fail(exc)
            raise
        finally:
            failure = guard.failure or guard.engine_error
            if failure is not None and not timing.failed:
                timing.fail(failure)
            if not (timing.complete or timing.failed):
                timing.cancelled = timing.failed = True
            if self.statistics is not None:
                timing.finish()
                self.statistics.record_request(timing)

    def _start(
        self, engine: InferenceEngine, request: ValidRequest
    ) -> AsyncGenerator[GenerationChunk, None]:
        """Check the admitted request against the engine it was routed to, then start it
        there."""
        check_context(request, engine, self.limits)
        if request.chat_template:
            prompt = engine.render_chat_prompt(request.prompt)
            request = dataclasses.replace(request, prompt=prompt, chat_template=False)
        return engine.generate(request)


def sooner(first: float | None, second: float | None) -> float | None:
    """The smaller of two timeouts; None is no timeout."""
    if first is None or second is None:
        return second if first is None else first
    return min(first, second)


def client_id(observer: GenerationObserver | None, request_id: str) -> str:
    """The id the client knows the request by (where the observer, an access log, has one),
    for traces; else the engine's."""
    return getattr(observer, "request_id", None) or request_id
