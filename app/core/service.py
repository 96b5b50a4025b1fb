"""The generation service: every frontend's one call into the engines."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.core.chunks import merge_chunks
from app.core.guard import RequestGuard, with_deadline
from app.core.limits import RequestLimits, check_request
from app.core.timing import RequestTiming, StatisticsRecorder
from app.core.types import GenerationChunk, GenerationObserver, GenerationRequest, ServingModel


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
    ) -> AsyncIterator[GenerationChunk]:
        """Errors before the first chunk (admission, limits, the engine refusing a parameter)
        are raised from the first `anext`; closing the iterator aborts the engine request."""
        run = self._stream if request.stream else self._one_response
        return run(model, request, observer)

    async def _stream(
        self, model: ServingModel, request: GenerationRequest, observer: GenerationObserver | None
    ) -> AsyncIterator[GenerationChunk]:
        timing = RequestTiming(model.name, model.version)
        try:
            async with model.admit(request.request_id):
                timing.admitted()
                chunks = self._start(model, request)
                try:
                    async for chunk in chunks:
                        timing.chunk()
                        if observer is not None:
                            observe(observer, chunk)
                        held = time.perf_counter_ns()
                        yield chunk
                        timing.output_ns += time.perf_counter_ns() - held
                finally:
                    await chunks.aclose()  # type: ignore[attr-defined]
        except Exception:
            timing.failed = True
            raise
        finally:
            self._record(timing)

    async def _one_response(
        self, model: ServingModel, request: GenerationRequest, observer: GenerationObserver | None
    ) -> AsyncIterator[GenerationChunk]:
        timing = RequestTiming(model.name, model.version)
        try:
            async with model.admit(request.request_id):
                timing.admitted()
                chunks = self._start(model, request)
                collected = []
                try:
                    async for chunk in chunks:
                        timing.chunk()
                        if observer is not None:
                            observe(observer, chunk)
                        collected.append(chunk)
                finally:
                    await chunks.aclose()  # type: ignore[attr-defined]
            held = time.perf_counter_ns()
            yield merge_chunks(collected, request.n)  # after admission: an aborted request raises there
            timing.output_ns += time.perf_counter_ns() - held
        except Exception:
            timing.failed = True
            raise
        finally:
            self._record(timing)

    def _record(self, timing: RequestTiming) -> None:
        """Statistics of an ended request: an error is a failure; one the client closed early
        is not (as in Triton, where only the backend's own errors count as failures)."""
        if self.statistics is not None:
            timing.finish()
            self.statistics.record_request(timing)

    @asynccontextmanager
    async def admission(
        self, model: ServingModel, request_id: str, observer: GenerationObserver | None = None
    ) -> AsyncIterator[RequestGuard]:
        """Admit a request whose engine streams the frontend starts itself (through a library's
        serving code): the guard checks its limits and runs each stream observed and within
        the request's deadline, as `generate` does."""
        async with model.admit(request_id):
            yield RequestGuard(request_id, self.limits, observer, self.timeout_seconds)

    def _start(self, model: ServingModel, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Check the admitted request against the limits and the engine, then start it."""
        check_request(request, model, self.limits)
        engine = model.engine
        if request.chat_template:
            prompt = engine.render_chat_prompt(request.prompt)
            request = dataclasses.replace(request, prompt=prompt, chat_template=False)
        chunks = engine.generate(request)
        if self.timeout_seconds is not None:
            chunks = with_deadline(chunks, self.timeout_seconds)
        return chunks


def observe(observer: GenerationObserver, chunk: GenerationChunk) -> None:
    observer.record_chunk(chunk.num_prompt_tokens, sum(c.num_tokens for c in chunk.completions))
