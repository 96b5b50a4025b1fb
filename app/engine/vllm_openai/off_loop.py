"""vLLM's completion and chat serving, their non-streamed responses built off the event loop.

Once the engine has finished a non-streamed request, vLLM's serving code builds the whole
response in one synchronous step: with `n` choices of many tokens and log-probabilities that
is seconds of Python (chat, 16 x 400 tokens x top 20: 1.3 s on a 2-core host), during which
the event loop, and with it every health probe and every other stream of the process, waits.
Here vLLM's code returns the build unrun (`DeferredResponse`), and the engine adapter runs it
in a worker thread (`built`), whose Python the interpreter interleaves with the loop's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from app.engine.vllm_openai.compat import OpenAIServingChat, OpenAIServingCompletion

__all__ = ["DeferredResponse", "OffLoopChat", "OffLoopCompletion", "built", "run_to_end"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DeferredResponse:
    """A full response of vLLM's serving code, to be built by calling `build`."""

    build: Callable[[], Any]


async def built(result: Any) -> Any:
    """`result` of vLLM's serving code, built in a worker thread where it was deferred."""
    if isinstance(result, DeferredResponse):
        return await asyncio.to_thread(result.build)
    return result


class OffLoopCompletion(OpenAIServingCompletion):
    """vLLM's completion serving, its full responses deferred."""

    def request_output_to_completion_response(  # type: ignore[override] # `built` runs it
        self, *args: Any, **kwargs: Any
    ) -> DeferredResponse:
        build = super().request_output_to_completion_response
        return DeferredResponse(partial(build, *args, **kwargs))


class OffLoopChat(OpenAIServingChat):
    """vLLM's chat serving, its full responses deferred: the engine's outputs are read here,
    on the loop; vLLM's build is given them as they ended."""

    async def chat_completion_full_generator(  # type: ignore[override] # `built` runs it
        self, request: Any, result_generator: AsyncIterator[Any], *args: Any, **kwargs: Any
    ) -> DeferredResponse:
        last, error = await final_output(result_generator)
        full_generator = super().chat_completion_full_generator

        def build() -> Any:
            outputs = replayed(last, error)
            return run_to_end(full_generator(request, outputs, *args, **kwargs))

        return DeferredResponse(build)


async def final_output(outputs: AsyncIterator[Any]) -> tuple[Any, BaseException | None]:
    """The last of `outputs` (None if none came), and the error that ended them, if any (a
    cancelled request is vLLM's "Client disconnected" as before)."""
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
    raise RuntimeError("vLLM's response build waited for something other than the outputs")
