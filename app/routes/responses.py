"""One path for every generate route: the request as the backend reads it, the core's
outputs as the backend's responses, the first one awaited while watching the client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from app.core.service import GenerationService
from app.core.types import GenerationChunk
from app.errors import ServerError
from app.http.disconnect import ClientDisconnected, until_disconnect
from app.observability.access_log import RequestLog
from app.repository.served_model import ServedModel
from app.schemas.generate import GenerateRequest
from app.triton.inputs import StreamPolicy, triton_request
from app.triton.outputs import ResponseBuilder

Responses = AsyncIterator[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class GenerationContext:
    """What a generate route brings to every request: the HTTP request (to watch for a
    disconnect), the generation service and the request's access-log record."""

    request: Request
    generation: GenerationService
    log: RequestLog | None


async def open_responses(
    context: GenerationContext, model: ServedModel, body: GenerateRequest, policy: StreamPolicy
) -> tuple[dict[str, Any], Responses] | None:
    """Validate, start the engine request and wait for its first response, so that errors
    before it are raised (and answered with their status); None when the client left first.
    Returns the first response and the rest (one response only when not streaming)."""
    if context.log is not None:
        context.log.model, context.log.version, context.log.prompt = model.name, model.version, body.text_input
    triton = triton_request(body, model, policy)
    builder = ResponseBuilder(triton, model.name, model.version)
    responses = built(builder, context.generation.generate(model, triton.generation, context.log), context.log)
    try:
        first = await until_disconnect(context.request, anext(responses))
    except ClientDisconnected:
        await responses.aclose()
        return None
    except BaseException:
        await responses.aclose()
        raise
    return first, responses


async def built(
    builder: ResponseBuilder, chunks: AsyncIterator[GenerationChunk], log: RequestLog | None
) -> Responses:
    """The backend's response for each chunk; closing this closes (aborts) the chunks. A
    failure is noted in the access log (a stream's status is already 200)."""
    try:
        async for chunk in chunks:
            yield builder.build(chunk)
    except ServerError as exc:
        if log is not None:
            log.error = exc.message
        raise
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
