"""One path for every generate route: the request as the backend reads it, the core's
outputs as the backend's responses, the engine's acceptance (a stream) or the first response
awaited while watching the client."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from app.core.routing import PIN_HEADER
from app.core.service import GenerationService
from app.core.types import GenerationChunk
from app.errors import ServerError
from app.http.dependencies import GenerationDep, RegistryDep, RequestLogDep, SettingsDep
from app.http.disconnect import ClientDisconnected, until_disconnect
from app.observability.access_log import RequestLog
from app.repository.registry import ModelRegistry
from app.repository.served_model import ServedModel
from app.schemas.generate import GenerateRequest
from app.triton.inputs import body_inputs
from app.triton.outputs import ResponseBuilder, formatted
from app.triton.request import StreamPolicy, triton_request

Responses = AsyncGenerator[dict[str, Any], None]


@dataclass(frozen=True, slots=True)
class GenerationContext:
    """What a generate route brings to every request: the HTTP request (to watch for a
    disconnect), the registry, the generation service, the request's access-log record
    and the keep-alive period of a stream."""

    request: Request
    registry: ModelRegistry
    generation: GenerationService
    log: RequestLog | None
    ping_seconds: int

    def model(self, name: str, version: str | None) -> ServedModel:
        return self.registry.get(name, version)


async def generation_context(
    request: Request,
    registry: RegistryDep,
    generation: GenerationDep,
    log: RequestLogDep,
    settings: SettingsDep,
) -> GenerationContext:
    """A coroutine, so that FastAPI builds it on the event loop (a plain function would be
    run in its thread pool: a thread hop per request)."""
    return GenerationContext(request, registry, generation, log, settings.sse_ping_seconds)


GenerationContextDep = Annotated[GenerationContext, Depends(generation_context)]


async def open_responses(
    context: GenerationContext, model: ServedModel, body: GenerateRequest, policy: StreamPolicy
) -> tuple[dict[str, Any] | None, Responses] | None:
    """Validate, start the engine request and wait until the engine has accepted it (a
    stream) or for its one response, so that errors before then are raised (and answered
    with their status); None when the client left first. Returns the first response, when
    it came first, and the responses still to come."""
    if context.log is not None:
        context.log.model, context.log.version, context.log.prompt = (
            model.name,
            model.version,
            body.text_input,
        )
    engine_accepted = asyncio.get_running_loop().create_future()
    limits = context.generation.limits
    triton = triton_request(body_inputs(body, limits), model, policy, limits)
    request = triton.request
    request.instance_pin = context.request.headers.get(PIN_HEADER)
    if request.stream:

        def accept() -> None:
            if not engine_accepted.done():
                engine_accepted.set_result(None)

        request = dataclasses.replace(request, on_accepted=accept)
    builder = ResponseBuilder(triton, model.name, model.version)
    responses = backend_responses(
        builder, context.generation.stream(model, request, context.log), context.log
    )
    first = asyncio.ensure_future(anext(responses))
    try:
        await until_disconnect(
            context.request, first_response_or_acceptance(first, engine_accepted)
        )
    except ClientDisconnected:
        await close(first, responses)
        return None
    except BaseException:
        await close(first, responses)
        raise
    if first.done():
        return first.result(), responses
    return None, first_then_rest(first, responses)


async def first_response_or_acceptance(
    first: asyncio.Future[Any], engine_accepted: asyncio.Future[None]
) -> None:
    """Wait for the first response or the engine's acceptance; the first response's error is
    raised here."""
    await asyncio.wait({first, engine_accepted}, return_when=asyncio.FIRST_COMPLETED)
    if first.done():
        first.result()


async def first_then_rest(first: asyncio.Future[dict[str, Any]], rest: Responses) -> Responses:
    """The first response (still on its way when the stream started), then the rest."""
    try:
        yield await first
        async for response in rest:
            yield response
    finally:
        await close(first, rest)


async def close(first: asyncio.Future[Any], responses: Responses) -> None:
    """Stop waiting for the first response and close the responses (aborting the request)."""
    if not first.done():
        first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await responses.aclose()


async def backend_responses(
    builder: ResponseBuilder, chunks: AsyncGenerator[GenerationChunk, None], log: RequestLog | None
) -> Responses:
    """The backend's response for each chunk; closing this closes (aborts) the chunks. A
    failure is noted in the access log (a stream's status is already 200)."""
    try:
        async for chunk in chunks:
            yield await formatted(builder.build, chunk)
    except ServerError as exc:
        if log is not None:
            log.error = exc.detail
        raise
    finally:
        await chunks.aclose()
