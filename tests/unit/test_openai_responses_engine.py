"""The vLLM adapter's side of `/v1/responses` without an engine: the server's limits on the
body (before vLLM's serving code), the response store kept off, and the stream: named
events, begun once the engine took the request, a refusal raised instead."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from pydantic import BaseModel, Field
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

from app.core.guard import RequestGuard
from app.core.limits import RequestLimits
from app.engine.vllm_openai import responses as openai_responses
from app.engine.vllm_openai.acceptance import AcceptanceKey, acceptance_key
from app.engine.vllm_openai.bodies import parse
from app.engine.vllm_openai.compat import ResponsesRequest
from app.engine.vllm_openai.guarded_request import EngineRequests, GuardedRequest
from app.engine.vllm_openai.limits import ModelBounds
from app.engine.vllm_openai.responses import responses_begun, responses_request, responses_server
from app.errors import InvalidRequestError, ModelNotFoundError, RequestTimeoutError
from app.openai.limits import check_body
from tests.unit.test_openai_engine import RefusingCheck, bodies
from tests.unit.test_request_limits import MANY, SERVER_TIME_LIMIT_MS

INPUT = {"model": "fake", "input": "Hi"}
MODEL = ModelBounds(max_logprobs=20, context_length=2048, vocab_size=49_152)
WEATHER = {"type": "function", "name": "f", "parameters": {"enum": [1] * MANY}}
CASES = [
    ({"max_output_tokens": 2**31 - 1}, "max_output_tokens: 2147483647 is above"),
    ({"max_output_tokens": "2000000"}, "max_output_tokens: 2000000 is above"),
    ({"stop": ["x"] * MANY}, f"stop: {MANY} stop strings and bad words"),
    ({"stop_token_ids": [1] * MANY}, "stop_token_ids: "),
    ({"logit_bias": {str(i): 1.0 for i in range(MANY)}}, "logit_bias: "),
    ({"top_logprobs": 10**9}, "top_logprobs: 1000000000 is above the model's limit of 20"),
    (
        {"structured_outputs": {"choice": [f"option {i}" for i in range(MANY)]}},
        "structured_outputs: the grammar is over this server's limit of 65536 bytes",
    ),
    (
        {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"enum": [1] * MANY}}}},
        "text: the grammar is over this server's limit of 65536 bytes",
    ),
    (
        {"tools": [WEATHER], "tool_choice": "required"},
        "tools: the grammar is over this server's limit of 65536 bytes",
    ),
]


def guard(max_tokens: int | None = 16, timeout: float | None = None) -> RequestGuard:
    return RequestGuard("admitted", RequestLimits(max_tokens=max_tokens), timeout_seconds=timeout)


@pytest.mark.parametrize(("fields", "message"), CASES, ids=[m.partition(":")[0] for _, m in CASES])
def test_limits_are_checked_before_vllms_serving_code(fields: dict[str, Any], message: str) -> None:
    """On the body as sent (the frontend's check) and as vLLM read it (`"2000000"` is a
    number to vLLM), in O(1)."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        with pytest.raises(InvalidRequestError) as raised:
            read_as_served({**INPUT, **fields})
        times.append(time.perf_counter() - started)
    assert raised.value.message.startswith(message), raised.value.message[:200]
    assert raised.value.param == message.partition(":")[0]
    assert min(times) * 1000 < SERVER_TIME_LIMIT_MS


def read_as_served(body: dict[str, Any]) -> None:
    """The frontend's check of the body as sent, then the engine adapter's reading."""
    check_body(body, RequestLimits(max_tokens=16), "max_output_tokens")
    responses_request(guard(), body, MODEL)


def test_max_output_tokens_is_capped_at_the_limit_when_unset_or_left() -> None:
    assert responses_request(guard(16), INPUT, MODEL).max_output_tokens == 16
    assert (
        responses_request(guard(16), {**INPUT, "max_output_tokens": 4}, MODEL).max_output_tokens
        == 4
    )
    assert responses_request(guard(None), INPUT, MODEL).max_output_tokens is None


def test_a_previous_response_is_404_as_none_is_stored() -> None:
    with pytest.raises(ModelNotFoundError) as raised:
        responses_request(guard(), {**INPUT, "previous_response_id": "resp_1"}, MODEL)
    assert raised.value.param == "previous_response_id"
    assert "does not store responses" in raised.value.message


def test_any_json_in_any_field_is_read_or_refused_with_a_400() -> None:
    @given(body=bodies(ResponsesRequest, {"input": "x"}))
    @settings(max_examples=400, deadline=None, derandomize=True, database=None)
    def check(body: dict[str, Any]) -> None:
        with contextlib.suppress(InvalidRequestError):
            parse(ResponsesRequest, body)

    check()


def test_the_response_store_stays_off_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class StoringServer:
        """Reads VLLM_ENABLE_RESPONSES_API_STORE=1, as vLLM's server would."""

        def __init__(self, engine_client: Any, models: Any, *, chat_template: str) -> None:
            self.chat_template = chat_template
            self.enable_store = True

    monkeypatch.setattr(openai_responses, "OffLoopResponses", StoringServer)
    arguments = {"chat_template": "t", "trust_request_chat_template": True}
    server = responses_server(None, None, arguments)
    assert server.enable_store is False and server.chat_template == "t"


class AcceptingLLM:
    """The `AsyncLLM` surface the stream needs: `generate` tells `on_accepted` once the
    engine took the request (or raises `refusal` instead), then gives `steps` outputs."""

    def __init__(
        self, steps: int = 2, delay: float = 0.0, refusal: Exception | None = None
    ) -> None:
        self.steps, self.delay, self.refusal = steps, delay, refusal
        self.on_accepted: dict[AcceptanceKey, Callable[[], None]] = {}
        self.accepted: list[str] = []

    async def engine_generate(
        self, prompt: Any, params: Any, request_id: str, **kwargs: Any
    ) -> Any:
        await asyncio.sleep(0)
        if self.refusal is not None:
            raise self.refusal
        self.on_accepted.pop(acceptance_key(request_id, prompt))()
        self.accepted.append(request_id)
        for step in range(self.steps):
            await asyncio.sleep(self.delay)
            yield SimpleNamespace(
                prompt_token_ids=[1] if step == 0 else None,
                outputs=[SimpleNamespace(token_ids=[step], text="x", finish_reason=None)],
                finished=step == self.steps - 1,
            )


class Event(BaseModel):
    type: str
    sequence_number: int = 0
    schema_: str | None = Field(None, alias="schema")


class VllmStream:
    """vLLM's Responses stream: two events before the engine request, one per output, then
    `response.completed`."""

    def __init__(self, params: SamplingParams | None = None) -> None:
        self.params = params or SamplingParams(output_kind=RequestOutputKind.DELTA)
        self.closed = False

    async def events(self, engine: GuardedRequest) -> AsyncGenerator[Event, None]:
        try:
            yield Event(type="response.created", schema="s")
            yield Event(type="response.in_progress")
            async for _ in engine.generate("x", self.params, "resp_1_0"):
                yield Event(type="response.output_text.delta")
            yield Event(type="response.completed")
        finally:
            self.closed = True


def names(frames: list[str]) -> list[str]:
    return [frame.split("\n")[0].removeprefix("event: ") for frame in frames]


async def test_a_stream_begins_once_the_engine_took_its_request() -> None:
    llm, vllm = AcceptingLLM(), VllmStream()
    engine = GuardedRequest(llm, guard(), EngineRequests())
    stream = await responses_begun(vllm.events(engine), engine)
    assert llm.accepted == ["resp_1_0"]
    frames = [frame async for frame in stream]
    assert names(frames) == [
        "response.created",
        "response.in_progress",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.completed",
    ]
    assert frames[0].endswith("\n\n")
    data = json.loads(frames[0].split("\n")[1].removeprefix("data: "))
    assert data == {"type": "response.created", "sequence_number": 0, "schema": "s"}
    assert vllm.closed


async def test_a_refused_request_is_raised_and_the_stream_closed_unread() -> None:
    refusal = InvalidRequestError("logit_bias: out of vocabulary", param="logit_bias")
    llm, vllm = AcceptingLLM(refusal=refusal), VllmStream()
    engine = GuardedRequest(llm, guard(), EngineRequests())
    with pytest.raises(InvalidRequestError) as raised:
        await responses_begun(vllm.events(engine), engine)
    assert raised.value is refusal and vllm.closed and llm.on_accepted == {}


async def test_a_refused_grammar_is_raised_before_the_engine_sees_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "app.engine.vllm_openai.guarded_request.grammar_check", lambda llm: RefusingCheck()
    )
    grammar = StructuredOutputsParams(json={"type": "object"})
    llm = AcceptingLLM()
    vllm = VllmStream(
        SamplingParams(structured_outputs=grammar, output_kind=RequestOutputKind.DELTA)
    )
    engine = GuardedRequest(llm, guard(), EngineRequests())
    with pytest.raises(InvalidRequestError, match="broken"):
        await responses_begun(vllm.events(engine), engine)
    assert vllm.closed and llm.accepted == []


async def test_a_stream_without_an_engine_request_gives_what_it_has() -> None:
    async def two_events() -> AsyncIterator[Event]:
        yield Event(type="response.created")
        yield Event(type="response.failed")

    engine = GuardedRequest(AcceptingLLM(), guard(), EngineRequests())
    stream = await responses_begun(two_events(), engine)  # type: ignore[arg-type]
    assert names([frame async for frame in stream]) == ["response.created", "response.failed"]


async def test_a_response_the_deadline_ended_is_not_completed() -> None:
    llm, vllm = AcceptingLLM(steps=1000, delay=0.01), VllmStream()
    engine = GuardedRequest(llm, guard(timeout=0.2), EngineRequests())
    frames = [frame async for frame in await responses_begun(vllm.events(engine), engine)]
    assert names(frames)[-1] == "response.output_text.delta"
    assert isinstance(engine.failure, RequestTimeoutError)
