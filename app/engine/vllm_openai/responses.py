"""OpenAI's Responses API (`POST /v1/responses`) through vLLM's `OpenAIServingResponses`:
stateless (vLLM's response store stays off, whatever VLLM_ENABLE_RESPONSES_API_STORE says:
it keeps every response in memory without bound), the server's limits checked on the body,
and a stream begun only once the engine took its request, as the other routes' streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from openai.types.responses import ResponseOutputMessage

from app.core.guard import RequestGuard
from app.engine.vllm_openai.acceptance import first_then_rest
from app.engine.vllm_openai.compat import ResponsesRequest, supported_arguments
from app.engine.vllm_openai.guarded_request import GuardedRequest
from app.engine.vllm_openai.limits import ModelBounds, read_within_limits
from app.engine.vllm_openai.off_loop import OffLoopResponses
from app.errors import InvalidRequestError, ModelNotFoundError

MAX_OUTPUT_TOKENS = "max_output_tokens"
"""The Responses API's name for `max_tokens`."""
COMPLETED = "response.completed"
"""The type of a stream's last event."""


def responses_server(llm: Any, models: Any, arguments: Mapping[str, Any]) -> Any:
    """vLLM's Responses server with those of the chat server's arguments that it takes (the
    renderer, chat template, parsers, usage options), its response store off and its
    log-probabilities built off the loop."""
    server = OffLoopResponses(llm, models, **supported_arguments(OffLoopResponses, dict(arguments)))
    server.enable_store = False
    return server


def responses_request(
    guard: RequestGuard,
    body: dict[str, Any],
    model: ModelBounds,
) -> Any:
    """The body as vLLM's `ResponsesRequest` within the server's limits (checked as sent and
    as read, `max_output_tokens` MAX_TOKENS_LIMIT when unset), or a 400 naming the field (a
    404 for a `previous_response_id`: none is stored)."""
    request = read_within_limits(ResponsesRequest, body, guard, model, MAX_OUTPUT_TOKENS)
    if request.previous_response_id is not None:
        raise ModelNotFoundError(
            f"previous_response_id: response '{request.previous_response_id[:256]}' not found: "
            "this server does not store responses (`store` is always false)",
            param="previous_response_id",
        )
    check_assistant_messages(request.input)
    return request


def check_assistant_messages(items: str | list[Any]) -> None:
    """Refuse, naming the field, an assistant message of the input whose content does not
    begin with text: vLLM renders such a message as its first part's `text`, and an empty
    `content` or a `refusal` part first would fail there as a server error."""
    for index, item in enumerate(() if isinstance(items, str) else items):
        if isinstance(item, ResponseOutputMessage) and not (
            item.content and item.content[0].type == "output_text"
        ):
            raise InvalidRequestError(
                f"input[{index}].content: an assistant message given as input must begin with "
                "an output_text part (its text is what the model reads)",
                param=f"input[{index}].content",
            )


async def sse_frames(
    events: AsyncGenerator[Any, None], served: GuardedRequest
) -> AsyncGenerator[str, None]:
    """vLLM's stream events as Server-Sent Events named by their type, as vLLM's server
    frames them (no `[DONE]`: `response.completed` ends the stream). A response the core
    ended early (its deadline, a drain) is not `completed`: the frontend ends the stream with
    the error instead."""
    try:
        async for event in events:
            kind = getattr(event, "type", "unknown")
            if kind == COMPLETED and served.failure is not None:
                return
            data = event.model_dump_json(indent=None, by_alias=True)
            yield f"event: {kind}\ndata: {data}\n\n"
    finally:
        await events.aclose()


async def responses_begun(
    events: AsyncGenerator[Any, None], served: GuardedRequest
) -> AsyncGenerator[str, None]:
    """The stream's frames, begun once the engine took its request. vLLM writes the first
    events (`response.created`, `response.in_progress`) before it asks for the engine request:
    they are held until the request's grammar passed its check and the engine took it. A
    refusal is raised here instead, the stream closed unread."""
    frames = sse_frames(events, served)
    held: list[str] = []
    pending = asyncio.ensure_future(anext(frames))
    try:
        while not await requested_or_ready(served, pending):
            try:
                held.append(pending.result())
            except StopAsyncIteration:
                return replay(held, None)
            pending = asyncio.ensure_future(anext(frames))
        await served.grammars_checked()
        accepted_all = asyncio.ensure_future(served.acceptances.all_accepted())
        try:
            await asyncio.wait({pending, accepted_all}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            accepted_all.cancel()
        refusal = served.acceptances.refusal()
        if refusal is not None:
            raise refusal
    except BaseException:
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await frames.aclose()
        raise
    return replay(held, first_then_rest(pending, frames))


async def requested_or_ready(served: GuardedRequest, pending: asyncio.Future[str]) -> bool:
    """Until the engine request was asked for (True) or the next frame is ready (False)."""
    requested = asyncio.ensure_future(served.requested.wait())
    waiting: set[asyncio.Future[Any]] = {pending, requested}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        requested.cancel()
    return served.requested.is_set()


async def replay(
    held: list[str], rest: AsyncGenerator[str, None] | None
) -> AsyncGenerator[str, None]:
    """The frames held, then the rest of the stream."""
    try:
        for frame in held:
            yield frame
        if rest is not None:
            async for frame in rest:
                yield frame
    finally:
        if rest is not None:
            await rest.aclose()
