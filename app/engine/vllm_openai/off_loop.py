"""vLLM's chat serving, its non-streamed responses built off the event loop.

Once the engine has finished a non-streamed chat request, vLLM's serving code builds the
whole response in one synchronous step: a pydantic object per log-probability, so `n` choices
of many tokens with `top_logprobs` take seconds of Python (16 x 400 tokens x 20: 1.3 s on a
2-core host), during which the event loop, and with it every health probe and every other
stream of the process, waits. Here the engine's outputs are read on the loop as before, and
the build runs in a worker thread, whose Python the interpreter interleaves with the loop's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from typing import Any, TypeVar

from app.engine.vllm_openai.compat import OpenAIServingChat

__all__ = ["OffLoopChat", "run_to_end"]

T = TypeVar("T")


class OffLoopChat(OpenAIServingChat):
    """vLLM's chat serving, its full (non-streamed) responses built in a worker thread."""

    async def chat_completion_full_generator(
        self, request: Any, result_generator: AsyncIterator[Any], *args: Any, **kwargs: Any
    ) -> Any:
        """vLLM's own build, given the engine's outputs read here: its last one, or how the
        stream ended (a cancelled request is vLLM's "Client disconnected" as before)."""
        last, error = await final_output(result_generator)
        build = super().chat_completion_full_generator(
            request, replayed(last, error), *args, **kwargs
        )
        return await asyncio.to_thread(run_to_end, build)


async def final_output(outputs: AsyncIterator[Any]) -> tuple[Any, BaseException | None]:
    """The last of `outputs` (None if none came), and the error that ended them, if any."""
    last = None
    try:
        async for output in outputs:
            last = output
    except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - raised again in the build
        return last, exc
    return last, None


async def replayed(last: Any, error: BaseException | None) -> AsyncGenerator[Any, None]:
    """The engine's outputs again, without waiting: the last one, then the error."""
    if last is not None:
        yield last
    if error is not None:
        raise error


def run_to_end(coroutine: Coroutine[Any, Any, T]) -> T:
    """The value of a coroutine that never waits (it reads only `replayed` outputs), run in
    the calling thread without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("vLLM's chat response build waited for something other than outputs")
