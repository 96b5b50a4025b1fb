"""vLLM's completion, chat and Responses serving, their non-streamed responses built off the
event loop.

Once the engine has finished a non-streamed request, vLLM's serving code builds the whole
response in one synchronous step: with `n` choices of many tokens and log-probabilities that
is seconds of Python (chat, 16 x 400 tokens x top 20: 1.3 s on a 2-core host), during which
the event loop, and with it every health probe and every other stream of the process, waits.
Here vLLM's code returns the build unrun (`DeferredResponse`), and the engine adapter runs it
in a worker thread (`finished_response`), whose Python the interpreter interleaves with the
loop's. The Responses API's build opens tool sessions around its reading of the outputs, so it
stays where it is; its costly part, the log-probabilities (1,500 tokens of 20 alternatives:
0.44 s), is built in a worker thread as the outputs end, and handed to it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from app.engine.vllm_openai.compat import (
    OpenAIServingChat,
    OpenAIServingCompletion,
    OpenAIServingResponses,
)

__all__ = [
    "DeferredResponse",
    "OffLoopChat",
    "OffLoopCompletion",
    "OffLoopResponses",
    "finished_response",
    "run_to_end",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DeferredResponse:
    """A full response of vLLM's serving code, to be built by calling `build`."""

    build: Callable[[], Any]


async def finished_response(result: Any) -> Any:
    """`result` of vLLM's serving code, built in a worker thread where it was deferred."""
    if isinstance(result, DeferredResponse):
        return await asyncio.to_thread(result.build)
    return result


class OffLoopCompletion(OpenAIServingCompletion):
    """vLLM's completion serving, its full responses deferred."""

    def request_output_to_completion_response(  # type: ignore[override] # deferred
        self, *args: Any, **kwargs: Any
    ) -> DeferredResponse:
        build = super().request_output_to_completion_response
        return DeferredResponse(partial(build, *args, **kwargs))


class OffLoopChat(OpenAIServingChat):
    """vLLM's chat serving, its full responses deferred: the engine's outputs are read here,
    on the loop; vLLM's build is given them as they ended."""

    async def chat_completion_full_generator(  # type: ignore[override] # deferred
        self, request: Any, result_generator: AsyncIterator[Any], *args: Any, **kwargs: Any
    ) -> DeferredResponse:
        last, error = await final_output(result_generator)
        full_generator = super().chat_completion_full_generator

        def build() -> Any:
            outputs = replayed(last, error)
            return run_to_end(full_generator(request, outputs, *args, **kwargs))

        return DeferredResponse(build)


@dataclass(slots=True)
class PreparedLogprobs:
    """A Responses build's log-probabilities, built for the engine's `source` list of them."""

    source: Any = None
    built: Any = None


PREPARED: ContextVar[PreparedLogprobs | None] = ContextVar("prepared_logprobs", default=None)
"""The log-probabilities prepared for the Responses build running in this task."""


class OffLoopResponses(OpenAIServingResponses):
    """vLLM's Responses serving, a non-streamed response's log-probabilities built in a worker
    thread once the engine's outputs end (still inside vLLM's tool sessions, as they were)."""

    async def responses_full_generator(self, *args: Any, **kwargs: Any) -> Any:
        full_generator = super().responses_full_generator
        arguments = inspect.signature(full_generator).bind(*args, **kwargs).arguments
        if not {"request", "result_generator", "context", "tokenizer"} <= arguments.keys():
            return await full_generator(*args, **kwargs)  # a release that names them otherwise
        prepared = PreparedLogprobs()
        outputs = arguments["result_generator"]
        arguments["result_generator"] = self._preparing(prepared, outputs, dict(arguments))
        token = PREPARED.set(prepared)
        try:
            return await full_generator(**arguments)
        finally:
            PREPARED.reset(token)

    async def _preparing(
        self, prepared: PreparedLogprobs, outputs: AsyncIterator[Any], arguments: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        """The engine's `outputs`, then the log-probabilities of the last, built off the loop
        (`arguments`: those of vLLM's build)."""
        async for output in outputs:
            yield output
        request = arguments["request"]
        completion = completion_with_logprobs(request, arguments["context"])
        if completion is not None:
            build = super()._create_response_logprobs
            prepared.built = await asyncio.to_thread(
                build,
                token_ids=completion.token_ids,
                logprobs=completion.logprobs,
                tokenizer=arguments["tokenizer"],
                top_logprobs=request.top_logprobs,
            )
            prepared.source = completion.logprobs

    def _create_response_logprobs(self, *args: Any, **kwargs: Any) -> Any:
        build = super()._create_response_logprobs
        logprobs = inspect.signature(build).bind(*args, **kwargs).arguments.get("logprobs")
        prepared = PREPARED.get()
        if prepared is not None and prepared.source is not None and prepared.source is logprobs:
            return prepared.built
        return build(*args, **kwargs)


def completion_with_logprobs(request: Any, context: Any) -> Any:
    """The one completion whose log-probabilities vLLM's build will turn into the response's,
    or None: only a plain (not harmony, not parsed) context's final output has them."""
    final = getattr(context, "final_output", None)
    if final is None or getattr(context, "streamed_output_items", None) is not None:
        return None
    if len(final.outputs) != 1 or not request.is_include_output_logprobs():
        return None
    return final.outputs[0] if final.outputs[0].logprobs else None


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
