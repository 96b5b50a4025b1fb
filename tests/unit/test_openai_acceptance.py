"""An OpenAI stream begins once the engine has taken its requests
(app/engine/vllm_openai/acceptance.py): a refusal while the engine takes one is raised before the
response starts (a 400 as unstreamed, not an error event in a 200 stream), against a scripted
engine and a stream that, as vLLM's serving code does, turns errors into an error event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from app.engine.vllm_openai.acceptance import AcceptanceKey, Acceptances, acceptance_key, begun


class ScriptedLLM:
    """What the acceptance needs of `AcceptingAsyncLLM`: the callbacks it calls once
    `add_request` returned."""

    def __init__(self) -> None:
        self.on_accepted: dict[AcceptanceKey, object] = {}
        self.closed: list[str] = []

    async def generate(
        self, request_id: str, refusal: Exception | None = None, taking: float = 0.01
    ) -> AsyncIterator[int]:
        try:
            await asyncio.sleep(taking)
            if refusal is not None:
                raise refusal
            accepted = self.on_accepted.pop(key(request_id))
            accepted()  # type: ignore[operator]
            for token in range(3):
                await asyncio.sleep(0.01)
                yield token
        finally:
            self.closed.append(request_id)


async def serving_stream(outputs: AsyncIterator[int]) -> AsyncGenerator[str, None]:
    """vLLM's stream generator in miniature: an error becomes the stream's last event."""
    try:
        async for output in outputs:
            yield f"token {output}"
    except Exception as exc:  # noqa: BLE001 - as vLLM's serving code does
        yield f"error: {exc}"


def stream_of(
    llm: ScriptedLLM, *refusals: Exception | None
) -> tuple[Acceptances, AsyncGenerator[str, None]]:
    acceptances = Acceptances(llm)
    outputs = [
        acceptances.watch(key(f"r{i}"), llm.generate(f"r{i}", refusal), streaming=True)
        for i, refusal in enumerate(refusals)
    ]

    async def merged() -> AsyncIterator[int]:
        for output in outputs:
            async for token in output:
                yield token

    return acceptances, serving_stream(merged())


async def test_a_stream_the_engine_took_begins_and_yields_every_frame() -> None:
    llm = ScriptedLLM()
    acceptances, stream = stream_of(llm, None)
    frames = [frame async for frame in await begun(stream, acceptances)]
    assert frames == ["token 0", "token 1", "token 2"]
    assert llm.on_accepted == {} and llm.closed == ["r0"]


async def test_a_refusal_while_the_engine_takes_a_request_is_raised_before_the_stream() -> None:
    llm = ScriptedLLM()
    acceptances, stream = stream_of(llm, ValueError("token id 60000 is out of vocabulary"))
    with pytest.raises(ValueError, match="out of vocabulary"):
        await begun(stream, acceptances)
    assert llm.on_accepted == {} and llm.closed == ["r0"]


async def test_a_refusal_ends_a_stream_quietly_and_reaches_whole_responses() -> None:
    """Streaming, vLLM's stream would log the refusal as a crash: `begun` raises it instead;
    a whole response's own reading meets it as before."""
    llm = ScriptedLLM()
    acceptances = Acceptances(llm)
    refused = acceptances.watch(key("r0"), llm.generate("r0", ValueError("no")), streaming=True)
    assert [frame async for frame in serving_stream(refused)] == []
    assert isinstance(acceptances.refusal(), ValueError)
    whole = Acceptances(llm).watch(key("r1"), llm.generate("r1", ValueError("no")), streaming=False)
    assert [frame async for frame in serving_stream(whole)] == ["error: no"]


async def test_a_client_gone_while_the_stream_begins_closes_it() -> None:
    llm = ScriptedLLM()
    acceptances = Acceptances(llm)
    slow = acceptances.watch(key("r0"), llm.generate("r0", taking=30), streaming=True)
    starting = asyncio.ensure_future(begun(serving_stream(slow), acceptances))
    await asyncio.sleep(0.05)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert llm.closed == ["r0"] and llm.on_accepted == {}


async def test_without_engine_requests_the_stream_begins_at_once() -> None:
    async def frames() -> AsyncGenerator[str, None]:
        yield "only"

    assert [frame async for frame in await begun(frames(), Acceptances(ScriptedLLM()))] == ["only"]


def key(request_id: str) -> AcceptanceKey:
    """The scripted engine's requests, each known by its id (and the one prompt all share)."""
    return acceptance_key(request_id, PROMPT)


PROMPT = {"prompt": "x"}
