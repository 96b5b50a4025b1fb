"""The generation service: every frontend's one call into the engines."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager

from app.core.chunks import merge_chunks
from app.core.guard import RequestGuard, with_deadline
from app.core.limits import RequestLimits, check_request
from app.core.routing import RouteHint
from app.core.timing import RequestTiming, StatisticsRecorder
from app.core.types import (
    GenerationChunk,
    GenerationObserver,
    GenerationRequest,
    InferenceEngine,
    ServingModel,
)


class GenerationService:
    """Admits a neutral request to a model, runs it on the model's engine and yields its
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

    def generate(
        self,
        model: ServingModel,
        request: GenerationRequest,
        observer: GenerationObserver | None = None,
    ) -> AsyncGenerator[GenerationChunk, None]:
        """Errors before the first chunk (admission, limits, the engine refusing a parameter)
        are raised from the first `anext`; closing the iterator aborts the engine request."""
        run = self._stream if request.stream else self._one_response
        return run(model, request, observer)

    async def _stream(
        self, model: ServingModel, request: GenerationRequest, observer: GenerationObserver | None
    ) -> AsyncGenerator[GenerationChunk, None]:
        timing = RequestTiming(model.name, model.version, client_id(observer, request.request_id))
        try:
            async with model.admit(request.request_id, request.route()) as engine:
                timing.admitted()
                chunks = self._start(engine, request)
                try:
                    async for chunk in chunks:
                        timing.chunk()
                        timing.engine_reported(chunk.timeline)
                        if observer is not None:
                            observe(observer, chunk)
                        timing.responded()
                        timing.complete = chunk.finished
                        held = time.monotonic_ns()
                        yield chunk
                        timing.held_ns += time.monotonic_ns() - held
                    timing.complete = True
                finally:
                    await chunks.aclose()
        except Exception as exc:
            timing.fail(exc)
            raise
        finally:
            self._record(timing)

    async def _one_response(
        self, model: ServingModel, request: GenerationRequest, observer: GenerationObserver | None
    ) -> AsyncGenerator[GenerationChunk, None]:
        timing = RequestTiming(model.name, model.version, client_id(observer, request.request_id))
        try:
            async with model.admit(request.request_id, request.route()) as engine:
                timing.admitted()
                chunks = self._start(engine, request)
                collected = []
                try:
                    async for chunk in chunks:
                        timing.chunk()
                        timing.engine_reported(chunk.timeline)
                        if observer is not None:
                            observe(observer, chunk)
                        collected.append(chunk)
                finally:
                    await chunks.aclose()
            # after admission: an aborted request raises there
            merged = merge_chunks(collected, request.n)
            timing.responded()
            timing.complete = True
            held = time.monotonic_ns()
            yield merged
            timing.held_ns += time.monotonic_ns() - held
        except Exception as exc:
            timing.fail(exc)
            raise
        finally:
            self._record(timing)

    def _record(self, timing: RequestTiming) -> None:
        """Statistics of an ended request: an error is a failure, and so is a request closed
        before its response was complete (the client went away: Triton's cancellation)."""
        if not (timing.complete or timing.failed):
            timing.cancelled = timing.failed = True
        if self.statistics is not None:
            timing.finish()
            self.statistics.record_request(timing)

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
        limits and runs each stream observed and within the request's deadline, as
        `generate` does."""
        timing = RequestTiming(model.name, model.version, client_id(observer, request_id))
        guard = None
        try:
            async with model.admit(request_id, route) as engine:
                timing.admitted()
                guard = RequestGuard(
                    request_id,
                    self.limits,
                    observer,
                    self.timeout_seconds,
                    timing=timing,
                    engine=engine,
                )
                yield guard
                timing.responded()
                timing.complete = True
        except Exception as exc:
            timing.fail(exc)
            raise
        finally:
            failure = None if guard is None else guard.failure or guard.engine_error
            if failure is not None and not timing.failed:
                timing.fail(failure)
            self._record(timing)

    def _start(
        self, engine: InferenceEngine, request: GenerationRequest
    ) -> AsyncGenerator[GenerationChunk, None]:
        """Check the admitted request against the limits and the engine it was routed to,
        then start it there."""
        check_request(request, engine, self.limits)
        if request.chat_template:
            prompt = engine.render_chat_prompt(request.prompt)
            request = dataclasses.replace(request, prompt=prompt, chat_template=False)
        chunks = engine.generate(request)
        if self.timeout_seconds is not None:
            chunks = with_deadline(chunks, self.timeout_seconds)
        return chunks


def observe(observer: GenerationObserver, chunk: GenerationChunk) -> None:
    observer.record_chunk(chunk.num_prompt_tokens, sum(c.num_tokens for c in chunk.completions))


def client_id(observer: GenerationObserver | None, request_id: str) -> str:
    """The id the client knows the request by (where the observer, an access log, has one),
    for traces; else the engine's."""
    return getattr(observer, "request_id", None) or request_id
