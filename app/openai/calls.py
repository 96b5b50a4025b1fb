"""One path for both generating routes: the body read, the model resolved, the request
admitted by the generation core and answered by the model's OpenAI API, with the client
watched until the response starts: a stream as soon as vLLM's serving code has checked the
request and returned it, as `vllm serve` does (not after the first token)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Send

from app.core.service import GenerationService
from app.errors import InvalidRequestError, ModelUnavailableError, ServerError
from app.http.disconnect import CLIENT_CLOSED_REQUEST, ClientDisconnected, until_disconnect
from app.http.errors import http_status
from app.observability.access_log import RequestLog
from app.openai.errors import error_frame
from app.openai.models import Target, resolve
from app.openai.serving import openai_serving
from app.repository.registry import ModelRegistry

DONE = "data: [DONE]\n\n"
COMPLETIONS = "create_completion"
CHAT_COMPLETIONS = "create_chat_completion"
PROMPT_FIELDS = {COMPLETIONS: "prompt", CHAT_COMPLETIONS: "messages"}
STREAM_STARTS = ""
"""What `run` yields first for a stream: the response can start."""

Results = AsyncIterator[dict[str, Any] | str]


@dataclass(frozen=True, slots=True)
class OpenAIContext:
    """What a route brings to a call: the HTTP request (body, headers, disconnects), the
    generation service and the request's access-log record."""

    request: Request
    generation: GenerationService
    log: RequestLog | None


async def respond(context: OpenAIContext, registry: ModelRegistry, endpoint: str) -> Response:
    """The JSON response, or the SSE stream once vLLM has checked the request; errors before
    that are answered with their status."""
    body = await read_body(context.request)
    target = target_of(registry, body)
    if context.log is not None:
        context.log.model, context.log.version = target.model.name, target.model.version
        context.log.prompt = prompt_text(body.get(PROMPT_FIELDS[endpoint]))
    results = run(context, target, body, endpoint)
    try:
        first = await until_disconnect(context.request, anext(results))
    except ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    if isinstance(first, dict):
        await results.aclose()
        return JSONResponse(first)
    return EventStreamResponse(results)


async def run(context: OpenAIContext, target: Target, body: dict[str, Any], endpoint: str) -> Results:
    """The response's JSON (one item), or `STREAM_STARTS` and the frames, under the request's
    admission. Errors once a stream has started are a frame of their own before `data: [DONE]`."""
    streaming, response = False, None
    try:
        async with context.generation.admission(target.model, uuid.uuid4().hex, context.log) as guard:
            serving = openai_serving(target.model)
            if serving is None:
                raise ModelUnavailableError(f"Model '{target.model.name}' is not started")
            create = getattr(serving, endpoint)
            result = await create(body, guard=guard, adapter=target.adapter, headers=context.request.headers)
            if isinstance(result, dict):
                response = result
            else:
                streaming = True
                yield STREAM_STARTS
                async with aclosing(result) as frames:  # type: ignore[type-var]
                    async for frame in frames:
                        if frame != DONE:
                            yield frame
                if guard.failure is not None:
                    raise guard.failure
    except ServerError as exc:
        if not streaming:
            raise
        yield error_frame(exc, http_status(exc))
    yield DONE if streaming else response  # type: ignore[misc]


async def read_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object (whatever its Content-Type), or a 400."""
    raw = await request.body()
    try:
        body = json.loads(raw, parse_constant=refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object")
    return body


def refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def target_of(registry: ModelRegistry, body: dict[str, Any]) -> Target:
    """The model (version, adapter) the body's `model` names."""
    model_id = body.get("model")
    if model_id is not None and not isinstance(model_id, str):
        raise InvalidRequestError("model: must be a string", param="model")
    return resolve(registry, model_id)


def prompt_text(prompt: Any) -> str | None:
    """The prompt (or the messages) as the access log shows it with LOG_PROMPTS."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False)


class EventStreamResponse(StreamingResponse):
    """The frames as they come; their iterator is closed however the response ends (a client
    gone mid-stream aborts the engine requests at once)."""

    def __init__(self, frames: Results) -> None:
        super().__init__(frames, media_type="text/event-stream")

    async def stream_response(self, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for frame in self.body_iterator:
                await send({"type": "http.response.body", "body": frame.encode(), "more_body": True})  # type: ignore[union-attr]
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.body_iterator.aclose()  # type: ignore[union-attr]
