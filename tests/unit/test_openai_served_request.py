"""vLLM's OpenAI serving objects are built once, on the engine itself: the engine requests
they ask for while serving a request run through that request's guard (its counts, its
deadline, known by its admitted id), concurrent requests each through their own, a stream's
engine requests asked for as it is read too; outside a request, the engine's `generate` is
its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM

from app.core.guard import RequestGuard
from app.core.limits import RequestLimits
from app.engine.vllm_openai.acceptance import acceptance_key
from app.engine.vllm_openai.accepting_llm import AcceptingAsyncLLM
from app.engine.vllm_openai.guarded_request import EngineRequests
from app.engine.vllm_openai.serving import VllmOpenAIServing


class Counts:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def record_chunk(self, num_prompt_tokens: int, num_new_tokens: int) -> None:
        self.calls.append((num_prompt_tokens, num_new_tokens))


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> AcceptingAsyncLLM:
    """An `AcceptingAsyncLLM` whose vLLM `generate` takes the request, then gives two tokens."""
    engine = AcceptingAsyncLLM.__new__(AcceptingAsyncLLM)
    engine.on_accepted = {}
    engine.started = []  # type: ignore[attr-defined]
    engine.shutdown = lambda *args, **kwargs: None  # type: ignore[method-assign]

    async def generate(
        self: Any, prompt: Any, params: Any, request_id: str, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        self.started.append(request_id)
        accepted = self.on_accepted.pop(acceptance_key(request_id, prompt), None)
        if accepted is not None:
            accepted()
        for step in range(2):
            await asyncio.sleep(0.01)
            yield SimpleNamespace(
                prompt_token_ids=[1, 2, 3] if step == 0 else None,
                outputs=[SimpleNamespace(token_ids=[step])],
            )

    monkeypatch.setattr(AsyncLLM, "generate", generate)
    return engine


class Answer(BaseModel):
    tokens: int


class ServingObject:
    """vLLM's serving object in miniature: it holds the engine and asks it for requests."""

    def __init__(self, engine_client: Any) -> None:
        self.engine_client = engine_client

    async def create_completion(self, request: Any, raw_request: Any) -> Answer:
        params = SamplingParams(max_tokens=2, output_kind=RequestOutputKind.FINAL_ONLY)
        outputs = self.engine_client.generate("x", params, f"cmpl-{request.name}")
        return Answer(tokens=len([output async for output in outputs]))

    async def create_responses(self, request: Any, raw_request: Any) -> AsyncGenerator[str, None]:
        async def events() -> AsyncGenerator[str, None]:
            yield "created"
            params = SamplingParams(max_tokens=2, output_kind=RequestOutputKind.DELTA)
            async for _ in self.engine_client.generate("x", params, f"resp-{request.name}"):
                yield "delta"

        return events()


def openai_api(llm: AcceptingAsyncLLM, requests: EngineRequests) -> VllmOpenAIServing:
    api = VllmOpenAIServing.__new__(VllmOpenAIServing)
    api._llm, api._name, api._requests, api._generate = llm, "m", requests, None
    return api


async def as_is(stream: AsyncGenerator[str, None], served: Any) -> AsyncGenerator[str, None]:
    return stream


async def test_concurrent_requests_run_through_their_own_guards_on_one_serving_object(
    llm: AcceptingAsyncLLM,
) -> None:
    server = ServingObject(llm)
    api = openai_api(llm, EngineRequests())
    guards = [RequestGuard(f"admitted-{i}", RequestLimits(), Counts()) for i in range(3)]
    answers = await asyncio.gather(
        *(
            api._serve(server.create_completion, SimpleNamespace(name=i), guard, None, {})
            for i, guard in enumerate(guards)
        )
    )
    assert answers == [b'{"tokens":2}'] * 3 and server.engine_client is llm
    for guard in guards:
        assert guard.observer.calls == [(3, 1), (0, 1)]  # type: ignore[union-attr]
    assert sorted(llm.started) == ["cmpl-0", "cmpl-1", "cmpl-2"]


async def test_an_engine_request_a_stream_asks_for_as_it_is_read_is_the_requests(
    llm: AcceptingAsyncLLM,
) -> None:
    requests = EngineRequests()
    guard = RequestGuard("admitted", RequestLimits(), Counts())
    stream = await openai_api(llm, requests)._serve(
        ServingObject(llm).create_responses, SimpleNamespace(name=1), guard, None, {}, as_is
    )
    assert not isinstance(stream, bytes)
    assert await anext(stream) == "created" and llm.started == []  # type: ignore[attr-defined]
    assert await anext(stream) == "delta" and requests == {"admitted": {"resp-1"}}
    assert [event async for event in stream] == ["delta"] and requests == {}
    assert guard.observer.calls == [(3, 1), (0, 1)]  # type: ignore[union-attr]


async def test_outside_a_served_request_generate_is_the_engines_own(
    llm: AcceptingAsyncLLM,
) -> None:
    outputs = [output async for output in llm.generate("x", SamplingParams(), "own")]
    assert len(outputs) == 2 and llm.started == ["own"]  # type: ignore[attr-defined]
