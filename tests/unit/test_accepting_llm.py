"""A request the engine takes while it dies is told of the death (and so resumes on the
replacement), never left waiting for outputs for good: vLLM checks the engine is alive before
taking a request and tells the requests it holds when it dies, but one whose taking spans the
death fell between the two."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.engine.output_processor import RequestOutputCollector

from app.engine.vllm_openai.accepting_llm import AcceptingAsyncLLM


def engine(monkeypatch: pytest.MonkeyPatch, dies_while_taking: bool) -> AcceptingAsyncLLM:
    """An `AcceptingAsyncLLM` (its vLLM parts stood in for) whose taking of a request ends
    after the engine died, or not."""
    llm = AcceptingAsyncLLM.__new__(AcceptingAsyncLLM)
    llm.on_accepted = {}
    llm.output_handler = None
    llm.engine_core = SimpleNamespace(resources=SimpleNamespace(engine_dead=False))
    llm.shutdown = lambda *args, **kwargs: None  # type: ignore[method-assign]

    async def add_request(self: Any, request_id: str, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
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
    llm.on_accepted["r"] = lambda: accepted.append("r")
    collector = await llm.add_request("r")
    with pytest.raises(EngineDeadError):
        await asyncio.wait_for(collector.get(), 5)
    assert accepted == []


async def test_a_request_taken_by_a_live_engine_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = engine(monkeypatch, dies_while_taking=False)
    accepted: list[str] = []
    llm.on_accepted["r"] = lambda: accepted.append("r")
    collector = await llm.add_request("r")
    assert accepted == ["r"] and collector.get_nowait() is None
