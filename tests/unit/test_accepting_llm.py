"""What `AcceptingAsyncLLM` tells of the engine's taking of a request. A request the engine
takes while it dies is told of the death (and so resumes on the replacement), never left
waiting for outputs for good: vLLM checks the engine is alive before taking a request and
tells the requests it holds when it dies, but one whose taking spans the death fell between
the two. Requests a client gave the same id are each told of their own taking."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.engine.output_processor import RequestOutputCollector

from app.engine.vllm_openai.acceptance import Acceptances, acceptance_key, begun
from app.engine.vllm_openai.accepting_llm import AcceptingAsyncLLM

PROMPT = {"prompt": "x"}


def engine(monkeypatch: pytest.MonkeyPatch, dies_while_taking: bool) -> AcceptingAsyncLLM:
    """An `AcceptingAsyncLLM` (its vLLM parts stood in for) whose taking of a request ends
    after the engine died, or not."""
    llm = AcceptingAsyncLLM.__new__(AcceptingAsyncLLM)
    llm.on_accepted = {}
    llm.output_handler = None
    llm.engine_core = SimpleNamespace(resources=SimpleNamespace(engine_dead=False))
    llm.shutdown = lambda *args, **kwargs: None  # type: ignore[method-assign]

    async def add_request(
        self: Any, request_id: str, prompt: Any, *args: Any, **kwargs: Any
    ) -> Any:
        await asyncio.sleep(prompt.get("taking", 0))
        if "refusal" in prompt:
            raise ValueError(prompt["refusal"])
        if dies_while_taking:
            self.engine_core.resources.engine_dead = True
        return RequestOutputCollector(RequestOutputKind.DELTA, request_id)

    monkeypatch.setattr(AsyncLLM, "add_request", add_request)
    return llm


async def test_a_request_taken_while_the_engine_died_gets_the_death(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = engine(monkeypatch, dies_while_taking=True)
    accepted: list[str] = []
    llm.on_accepted[acceptance_key("r", PROMPT)] = lambda: accepted.append("r")
    collector = await llm.add_request("r", PROMPT)
    with pytest.raises(EngineDeadError):
        await asyncio.wait_for(collector.get(), 5)
    assert accepted == []


async def test_a_request_taken_by_a_live_engine_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = engine(monkeypatch, dies_while_taking=False)
    accepted: list[str] = []
    llm.on_accepted[acceptance_key("r", PROMPT)] = lambda: accepted.append("r")
    collector = await llm.add_request("r", PROMPT)
    assert accepted == ["r"] and collector.get_nowait() is None


async def test_requests_given_the_same_id_are_each_told_of_their_own_taking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two OpenAI requests with one `X-Request-Id` share vLLM's request id. The first is
    taken at once; the second is refused while the engine takes it, later: its stream must
    not begin on the first one's acceptance, but raise its refusal (a 400, not an error
    event in a 200 stream)."""
    llm = engine(monkeypatch, dies_while_taking=False)
    first, second = {"prompt": "a", "taking": 0.01}, {"prompt": "b", "taking": 0.2}
    second["refusal"] = "token id 60000 is out of vocabulary"
    first_acceptances, second_acceptances = Acceptances(llm), Acceptances(llm)
    first_stream = frames(
        first_acceptances.watch(acceptance_key("same", first), outputs(llm, first), streaming=True)
    )
    second_stream = frames(
        second_acceptances.watch(
            acceptance_key("same", second), outputs(llm, second), streaming=True
        )
    )
    first_begun = asyncio.ensure_future(begun(first_stream, first_acceptances))
    with pytest.raises(ValueError, match="out of vocabulary"):
        await begun(second_stream, second_acceptances)
    assert [frame async for frame in await first_begun] == ["token 0", "token 1"]
    assert llm.on_accepted == {}


async def outputs(llm: AcceptingAsyncLLM, prompt: dict[str, Any]) -> AsyncIterator[int]:
    """`AsyncLLM.generate` in miniature: the request taken, then its tokens."""
    await llm.add_request("same", prompt)
    for token in range(2):
        await asyncio.sleep(0.01)
        yield token


async def frames(tokens: AsyncIterator[int]) -> AsyncGenerator[str, None]:
    async for token in tokens:
        yield f"token {token}"
