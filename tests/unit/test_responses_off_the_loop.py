"""A response of many log-probabilities is built off the event loop. OpenAI: vLLM's build of
a non-streamed completion or chat response (here stand-ins for them, in their place on vLLM's
classes) is deferred, given the engine's outputs as they ended, and run in a worker thread
while the loop goes on serving. Triton (HTTP and gRPC): a chunk's outputs are formatted in a
worker thread where it carries many log-probability positions."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from app.core.types import CompletionDelta, GenerationChunk
from app.engine.vllm_openai.compat import OpenAIServingChat, OpenAIServingCompletion
from app.engine.vllm_openai.off_loop import (
    DeferredResponse,
    OffLoopChat,
    OffLoopCompletion,
    finished_response,
    run_to_end,
)
from app.errors import RequestTimeoutError
from app.triton.outputs import OFF_LOOP_POSITIONS, formatted

LOOP_TICKS = 5


async def chat_build(self: Any, request: Any, outputs: AsyncIterator[Any], *args: Any) -> Any:
    """vLLM's chat build in miniature: it reads every output, then answers with the last."""
    last = None
    try:
        async for output in outputs:
            last = output
    except asyncio.CancelledError:
        return "Client disconnected"
    return (request, last, args)


def completion_build(self: Any, outputs: list[Any], request: Any, *args: Any) -> Any:
    return (request, outputs, args)


@pytest.fixture(autouse=True)
def vllms_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(OpenAIServingChat, "chat_completion_full_generator", chat_build)
    monkeypatch.setattr(
        OpenAIServingCompletion, "request_output_to_completion_response", completion_build
    )


def chat() -> OffLoopChat:
    return OffLoopChat.__new__(OffLoopChat)


async def outputs(*items: Any, error: BaseException | None = None) -> AsyncGenerator[Any, None]:
    for item in items:
        await asyncio.sleep(0)
        yield item
    if error is not None:
        raise error


async def test_vllms_chat_build_is_deferred_and_given_the_last_output() -> None:
    deferred = await chat().chat_completion_full_generator("request", outputs(1, 2, 3), "id")
    assert isinstance(deferred, DeferredResponse)
    assert deferred.build() == ("request", 3, ("id",))


async def test_vllms_completion_build_is_deferred_with_its_arguments() -> None:
    completion = OffLoopCompletion.__new__(OffLoopCompletion)
    deferred = completion.request_output_to_completion_response([1, 2], "request", "id")
    assert isinstance(deferred, DeferredResponse)
    assert deferred.build() == ("request", [1, 2], ("id",))


async def test_an_error_that_ended_the_outputs_is_raised_by_the_build() -> None:
    stream = outputs(1, error=RequestTimeoutError("late"))
    deferred = await chat().chat_completion_full_generator("request", stream)
    with pytest.raises(RequestTimeoutError):
        await finished_response(deferred)


async def test_cancelled_outputs_reach_the_build_as_vllms_client_disconnected() -> None:
    stream = outputs(1, error=asyncio.CancelledError())
    deferred = await chat().chat_completion_full_generator("request", stream)
    assert await finished_response(deferred) == "Client disconnected"


async def ticking(done: threading.Event) -> None:
    """The loop's own work while a build runs: a few turns, then the build may end."""
    for _ in range(LOOP_TICKS):
        await asyncio.sleep(0.01)
    done.set()


async def test_a_deferred_build_runs_in_a_worker_thread_while_the_loop_keeps_serving() -> None:
    loop_turned = threading.Event()

    def build() -> tuple[threading.Thread, bool]:  # as long as its synchronous work takes
        return threading.current_thread(), loop_turned.wait(timeout=30)

    ticker = asyncio.ensure_future(ticking(loop_turned))
    thread, loop_ran = await finished_response(DeferredResponse(build))
    await ticker
    assert thread is not threading.main_thread()
    assert loop_ran  # the loop turned while the build was still running
    assert await finished_response("a stream") == "a stream"


async def test_a_build_that_waits_for_something_else_is_an_error_not_a_hang() -> None:
    async def waits() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="waited"):
        run_to_end(waits())


def chunk_of(positions: int) -> GenerationChunk:
    logprobs = [{7: {"logprob": -0.5, "rank": 1, "decoded_token": "a"}}] * positions
    completion = CompletionDelta(0, "a" * positions, positions, -1.0, logprobs)
    return GenerationChunk([completion], num_prompt_tokens=1, finished=True)


def where_formatted(chunk: GenerationChunk) -> threading.Thread:
    return threading.current_thread()


@pytest.mark.parametrize(
    ("positions", "off_the_loop"), [(0, False), (OFF_LOOP_POSITIONS - 1, False), (2048, True)]
)
async def test_a_triton_chunk_of_many_logprobs_is_formatted_in_a_worker_thread(
    positions: int, off_the_loop: bool
) -> None:
    thread = await formatted(where_formatted, chunk_of(positions))
    assert (thread is not threading.main_thread()) == off_the_loop
