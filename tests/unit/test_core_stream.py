"""The core's one stream loop (GenerationService.stream over RequestGuard.stream): closing a
request's stream aborts its engine request at once, and its statistics say how it ended."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest

from app.core.service import GenerationService
from app.core.timing import RequestTiming
from app.core.types import CompletionDelta, GenerationChunk, ServingModel, ValidRequest
from app.errors import RequestTimeoutError


class Engine:
    """Yields `steps` chunks, waiting `delay` seconds before each; notes when it is closed."""

    max_model_len = 4096
    max_logprobs = 20

    def __init__(self, steps: int = 5, delay: float = 0.0) -> None:
        self.steps, self.delay = steps, delay
        self.closed = False

    async def generate(self, request: ValidRequest) -> AsyncGenerator[GenerationChunk, None]:
        import asyncio

        try:
            for step in range(self.steps):
                await asyncio.sleep(self.delay)
                yield GenerationChunk([CompletionDelta(0, "x", 1)], 2, step == self.steps - 1)
        finally:
            self.closed = True


class Model:
    name, version = "m", "1"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @asynccontextmanager
    async def admit(self, request_id: str, route: Any = None) -> AsyncIterator[Engine]:
        yield self.engine


def serving(engine: Engine) -> ServingModel:
    """The model double as the service sees it (its engine has only what these tests use)."""
    return cast(ServingModel, Model(engine))


class Recorded:
    def __init__(self) -> None:
        self.timings: list[RequestTiming] = []

    def record_request(self, timing: RequestTiming) -> None:
        self.timings.append(timing)


@pytest.mark.parametrize("stream", [True, False])
async def test_a_whole_request_is_complete(stream: bool) -> None:
    recorded = Recorded()
    service = GenerationService(statistics=recorded)
    request = ValidRequest("r", "p", {}, stream)
    chunks = [c async for c in service.stream(serving(Engine()), request)]
    assert len(chunks) == (5 if stream else 1)
    [timing] = recorded.timings
    assert timing.complete and not timing.failed and timing.first_response_ns is not None


async def test_closing_a_stream_aborts_its_engine_request_at_once() -> None:
    engine, recorded = Engine(), Recorded()
    chunks = GenerationService(statistics=recorded).stream(
        serving(engine), ValidRequest("r", "p", {}, stream=True)
    )
    await anext(chunks)
    await chunks.aclose()
    assert engine.closed
    [timing] = recorded.timings
    assert timing.cancelled and timing.failed


@pytest.mark.parametrize("stream", [True, False])
async def test_the_deadline_ends_a_request_with_its_error(stream: bool) -> None:
    engine, recorded = Engine(steps=100, delay=0.05), Recorded()
    service = GenerationService(timeout_seconds=0.2, statistics=recorded)
    with pytest.raises(RequestTimeoutError):
        async for _ in service.stream(serving(engine), ValidRequest("r", "p", {}, stream)):
            pass
    assert engine.closed
    [timing] = recorded.timings
    assert isinstance(timing.error, RequestTimeoutError) and not timing.cancelled
