"""The Responses API's non-streamed answer: vLLM's own build (run here as it is, on a
stand-in engine's outputs) is handed the log-probabilities, its costly part, built in a
worker thread once the outputs ended, while the loop goes on serving."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from vllm import CompletionOutput, RequestOutput, SamplingParams
from vllm.entrypoints.openai.responses.context import SimpleContext
from vllm.logprobs import Logprob

from app.engine.vllm_openai.compat import OpenAIServingResponses, ResponsesRequest
from app.engine.vllm_openai.off_loop import OffLoopResponses
from tests.support.off_loop import ThreadRecord

TOKENS = [11, 12, 13]
TOP = 2
WITH_LOGPROBS = {"include": ["message.output_text.logprobs"], "top_logprobs": TOP}


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> ThreadRecord:
    """Where vLLM's log-probability build ran."""
    record = ThreadRecord()
    original = OpenAIServingResponses._create_response_logprobs
    monkeypatch.setattr(
        OpenAIServingResponses, "_create_response_logprobs", record.wrapping(original)
    )
    return record


def serving() -> OffLoopResponses:
    """vLLM's Responses serving with only what its non-streamed build of a plain answer reads."""
    server = OffLoopResponses.__new__(OffLoopResponses)
    server.use_harmony = False
    server.enable_log_outputs = False
    server.request_logger = None
    server.enable_auto_tools = False
    server.enable_per_request_metrics = False
    server.return_tokens_as_token_ids = False
    return server


def engine_output(token: int, index: int) -> RequestOutput:
    alternatives = {token: Logprob(-0.5, 1, f" t{token}")}
    alternatives.update({900 + n: Logprob(-1.0 - n, n + 2, f" a{n}") for n in range(TOP)})
    completion = CompletionOutput(index, f" t{token}", [token], None, [alternatives])
    finished = index == len(TOKENS) - 1
    return RequestOutput("id", "Hi", [1, 2], None, [completion], finished=finished)


async def answered(body: dict[str, Any], builds: ThreadRecord) -> tuple[Any, threading.Event]:
    request = ResponsesRequest(model="smollm2", input="Hi", store=False, **body)
    context = SimpleContext()

    async def outputs() -> AsyncGenerator[SimpleContext, None]:
        for index, token in enumerate(TOKENS):
            await asyncio.sleep(0)
            context.append_output(engine_output(token, index))
            yield context

    async def ticking() -> None:
        for _ in range(5):
            await asyncio.sleep(0.01)
        builds.loop_turned.set()

    ticker = asyncio.ensure_future(ticking())
    response = await serving().responses_full_generator(
        request, SamplingParams(), outputs(), context, "smollm2", None, None
    )
    await ticker
    return response, builds.loop_turned


async def test_the_logprobs_are_built_in_a_worker_thread_and_used_by_vllms_build(
    builds: ThreadRecord,
) -> None:
    response, _ = await answered(WITH_LOGPROBS, builds)
    (message,) = response.output
    logprobs = message.content[0].logprobs
    assert [entry.token for entry in logprobs] == [f" t{token}" for token in TOKENS]
    assert [len(entry.top_logprobs) for entry in logprobs] == [TOP] * len(TOKENS)
    assert message.content[0].text == "".join(f" t{token}" for token in TOKENS)
    (thread,) = builds.threads  # built once, not again by vLLM's build
    assert thread is not threading.main_thread()
    assert builds.loop_ran == [True]  # the loop turned while the build was running


async def test_an_answer_without_logprobs_builds_none(builds: ThreadRecord) -> None:
    response, _ = await answered({}, builds)
    assert response.output[0].content[0].logprobs is None
    assert builds.threads == []


async def test_outside_a_non_streamed_build_vllms_logprobs_are_built_where_asked(
    builds: ThreadRecord,
) -> None:
    output = engine_output(TOKENS[0], 0).outputs[0]
    built = serving()._create_response_logprobs(
        token_ids=output.token_ids, logprobs=output.logprobs, tokenizer=None, top_logprobs=TOP
    )
    assert [entry.token for entry in built] == [f" t{TOKENS[0]}"]
    assert builds.threads == [threading.main_thread()]
