"""A response of many log-probabilities is built off the event loop. OpenAI chat: vLLM's
build of a non-streamed response (here a stand-in for it, in its place on vLLM's class) runs
in a worker thread, given the engine's outputs as they ended, while the loop goes on serving.
Triton (HTTP and gRPC): a chunk's outputs are formatted in a worker thread where it carries
many log-probability positions."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from app.core.types import CompletionDelta, GenerationChunk
from app.engine.vllm_openai.compat import OpenAIServingChat
from app.engine.vllm_openai.off_loop import OffLoopChat, run_to_end
from app.errors import RequestTimeoutError
from app.triton.outputs import OFF_LOOP_POSITIONS, formatted

LOOP_TICKS = 5


class Build:
    """vLLM's full-response build in miniature: it reads every output, then answers with the
    last one; where it ran, and whether the loop ran meanwhile, are recorded."""

    def __init__(self, wait_for_loop: threading.Event | None = None) -> None:
        self.thread: threading.Thread | None = None
        self.wait_for_loop = wait_for_loop
        self.loop_ran = False

    async def __call__(self, request: Any, outputs: AsyncIterator[Any], *args: Any) -> Any:
        last = None
        try:
            async for output in outputs:
                last = output
        except asyncio.CancelledError:
            return "Client disconnected"
        self.thread = threading.current_thread()
        if self.wait_for_loop is not None:  # the build's synchronous work, as long as it takes
            self.loop_ran = self.wait_for_loop.wait(timeout=30)
        return (request, last, args)


@pytest.fixture
def build(monkeypatch: pytest.MonkeyPatch) -> Build:
    stand_in = Build(threading.Event())
    monkeypatch.setattr(OpenAIServingChat, "chat_completion_full_generator", stand_in)
    return stand_in


def chat() -> OffLoopChat:
    return OffLoopChat.__new__(OffLoopChat)


async def outputs(*items: Any, error: BaseException | None = None) -> AsyncGenerator[Any, None]:
    for item in items:
        await asyncio.sleep(0)
        yield item
    if error is not None:
        raise error


async def ticking(done: threading.Event) -> None:
    """The loop's own work while a build runs: a few turns, then the build may end."""
    for _ in range(LOOP_TICKS):
        await asyncio.sleep(0.01)
    done.set()


async def test_the_build_runs_in_a_worker_thread_while_the_loop_keeps_serving(
    build: Build,
) -> None:
    assert build.wait_for_loop is not None
    ticker = asyncio.ensure_future(ticking(build.wait_for_loop))
    answer = await chat().chat_completion_full_generator("request", outputs(1, 2, 3), "id")
    await ticker
    assert answer == ("request", 3, ("id",))
    assert build.thread is not None and build.thread is not threading.main_thread()
    assert build.loop_ran  # the loop turned while the build was still running


async def test_an_error_that_ended_the_outputs_is_raised_by_the_build(build: Build) -> None:
    build.wait_for_loop = None
    with pytest.raises(RequestTimeoutError):
        await chat().chat_completion_full_generator(
            "request", outputs(1, error=RequestTimeoutError("late"))
        )


async def test_cancelled_outputs_reach_the_build_as_vllms_client_disconnected(
    build: Build,
) -> None:
    build.wait_for_loop = None
    stream = outputs(1, error=asyncio.CancelledError())
    assert await chat().chat_completion_full_generator("request", stream) == "Client disconnected"


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
