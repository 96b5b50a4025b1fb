"""One path for the generating routes: the body read, the model resolved, the request
admitted by the generation core and answered by the model's OpenAI API, with the client
watched until the response starts: a stream as soon as vLLM's serving code has checked the
request and returned it, as `vllm serve` does (not after the first token)."""

from __future__ import annotations

import enum
import json
import logging
import uuid
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final, Literal

from fastapi import Request
from fastapi.responses import Response
from starlette.datastructures import Headers

from app.core.limits import check_name
from app.core.service import GenerationService
from app.errors import InvalidRequestError, ModelUnavailableError, ServerError
from app.http.access_log import REQUEST_ID_HEADER, safe_request_id
from app.http.disconnect import CLIENT_CLOSED_REQUEST, ClientDisconnected, until_disconnect
from app.http.errors import http_status
from app.http.parsing import parsed
from app.http.sse import EventStream
from app.observability.access_log import RequestLog
from app.openai.errors import error_event, error_frame
from app.openai.limits import check_body
from app.openai.models import Target, resolve
from app.openai.routing import route_hint
from app.openai.serving import engine_openai_serving
from app.repository.registry import ModelRegistry
from app.schemas.openai import OpenAIEndpoint
from app.schemas.validation import check_unicode, may_hold_surrogates

logger = logging.getLogger(__name__)

DONE = "data: [DONE]\n\n"


class StreamStarts(enum.Enum):
    """What `run` yields first for a stream: the response can start."""

    MARKER = enum.auto()


STREAM_STARTS: Final = StreamStarts.MARKER

Results = AsyncGenerator[bytes | Literal[StreamStarts.MARKER] | str, None]


@dataclass(frozen=True, slots=True)
class OpenAIContext:
    """What a route brings to a call: the HTTP request (body, headers, disconnects), the
    generation service and the request's access-log record."""

    request: Request
    generation: GenerationService
    log: RequestLog | None


async def respond(
    context: OpenAIContext, registry: ModelRegistry, endpoint: OpenAIEndpoint
) -> Response:
    """The JSON response, or the SSE stream once vLLM has checked the request; errors before
    that are answered with their status."""
    body = await read_body(context.request)
    target = target_of(registry, body)
    if context.log is not None:
        context.log.model, context.log.version = target.model.name, target.model.version
        context.log.prompt = prompt_text(body.get(endpoint.value))
    results = run(context, target, body, endpoint)
    try:
        first = await until_disconnect(context.request, anext(results))
    except ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    if isinstance(first, bytes):
        await results.aclose()
        return Response(first, media_type="application/json")
    return EventStream(frames_of(results))


async def run(
    context: OpenAIContext, target: Target, body: dict[str, Any], endpoint: OpenAIEndpoint
) -> Results:
    """The response's JSON text (one item), or `STREAM_STARTS` and the frames, under the request's
    admission. Errors once a stream has started are a frame of their own before `data: [DONE]`
    (the Responses API's: an `error` event, and no `[DONE]`)."""
    streaming, response, sent = False, None, 0
    try:
        limits = context.generation.limits
        check_body(body, limits, endpoint.max_tokens_field(body))
        route = route_hint(body.get(endpoint.value), target.adapter, context.request.headers)
        async with context.generation.admission(
            target.model, uuid.uuid4().hex, context.log, route
        ) as guard:
            serving = engine_openai_serving(guard.engine)
            if serving is None:
                raise ModelUnavailableError(f"Model '{target.model.name}' is not started")
            result = await serving.create(
                endpoint,
                body,
                guard=guard,
                adapter=target.adapter,
                headers=forwarded_headers(context.request.headers),
            )
            if isinstance(result, bytes):
                response = result
            else:
                streaming = True
                yield STREAM_STARTS
                async with aclosing(result) as frames:
                    async for frame in frames:
                        if frame != DONE:
                            sent += 1
                            yield frame
                if guard.failure is not None:
                    raise guard.failure
    except ServerError as exc:
        if not streaming:
            raise
        yield failure_frame(endpoint, exc, sent)
    except Exception as exc:
        if not streaming:
            raise
        logger.exception("stream failed after it started")
        yield failure_frame(endpoint, ServerError(f"Error generating stream: {exc}"), sent)
    if streaming and endpoint is not OpenAIEndpoint.RESPONSES:
        yield DONE
    elif response is not None:
        yield response


def forwarded_headers(headers: Headers) -> Mapping[str, str]:
    """The headers vLLM's serving code reads, without an X-Request-Id the access log would not
    take either (vLLM names the request, and every chunk of its answer, by it)."""
    request_id = headers.get(REQUEST_ID_HEADER)
    if request_id is None or safe_request_id(request_id) is not None:
        return headers
    forwarded = headers.mutablecopy()
    del forwarded[REQUEST_ID_HEADER]
    return forwarded


def failure_frame(endpoint: OpenAIEndpoint, exc: ServerError, sent: int) -> str:
    """The frame of an error once `sent` frames of the stream went out."""
    if endpoint is OpenAIEndpoint.RESPONSES:
        return error_event(exc, http_status(exc), sent)
    return error_frame(exc, http_status(exc))


async def frames_of(results: Results) -> AsyncGenerator[bytes, None]:
    """The SSE frames of a started stream."""
    async with aclosing(results):
        async for item in results:
            if isinstance(item, str):
                yield item.encode()


async def read_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object (whatever its Content-Type), or a 400."""
    return await parsed(json_object, await request.body())


def json_object(raw: bytes) -> dict[str, Any]:
    """`raw` as a JSON object of valid Unicode text, or a 400."""
    try:
        body = json.loads(raw, parse_constant=refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object")
    if may_hold_surrogates(raw):
        check_unicode(body)
    return body


def refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def target_of(registry: ModelRegistry, body: dict[str, Any]) -> Target:
    """The model (version, adapter) the body's `model` names."""
    model_id = body.get("model")
    if model_id is not None and not isinstance(model_id, str):
        raise InvalidRequestError("model: must be a string", param="model")
    check_name("model", model_id)
    return resolve(registry, model_id)


def prompt_text(prompt: Any) -> str | None:
    """The prompt (or the messages) as the access log shows it with LOG_PROMPTS."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False)
