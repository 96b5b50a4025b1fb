"""Triton's generate extension: `generate` and `generate_stream`, with and without a version,
plus a GET `generate_stream` for browsers' `EventSource`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from app.engine.generation import generate_response, prepare, stream_deltas
from app.engine.registry import ModelRegistry, ServedModel
from app.errors import InvalidRequestError, ServerError
from app.routes.dependencies import generate_request_body, get_registry
from app.routes.openapi_examples import (
    ERROR_RESPONSES,
    EVENT_SOURCE_DESCRIPTION,
    EVENT_SOURCE_RESPONSE,
    GENERATE_REQUEST_BODY,
    GENERATE_RESPONSE,
    QUERY_EXAMPLES,
    STREAM_REQUEST_BODY,
    STREAM_RESPONSE,
)
from app.routes.query import generate_request_from_query, query_parameters_openapi
from app.routes.sse import (
    EVENT_SOURCE_FRAMING,
    TRITON_FRAMING,
    EventStream,
    Framing,
    error_event_stream,
    sse_frames,
)
from app.schemas.generate import GenerateRequest, GenerateResponse

router = APIRouter(tags=["generate"])

T = TypeVar("T")
CLIENT_CLOSED_REQUEST = 499
QUERY_PARAMETERS = query_parameters_openapi(QUERY_EXAMPLES)


@router.post(
    "/v2/models/{model_name}/generate",
    summary="Generate text (one JSON response)",
    response_model=GenerateResponse,
    responses={200: GENERATE_RESPONSE, **ERROR_RESPONSES},
    openapi_extra=GENERATE_REQUEST_BODY,
)
@router.post(
    "/v2/models/{model_name}/versions/{model_version}/generate",
    summary="Generate text with a given model version (one JSON response)",
    response_model=GenerateResponse,
    responses={200: GENERATE_RESPONSE, **ERROR_RESPONSES},
    openapi_extra=GENERATE_REQUEST_BODY,
)
async def generate(
    model_name: str,
    request: Request,
    model_version: str | None = None,
    body: GenerateRequest = Depends(generate_request_body),
    registry: ModelRegistry = Depends(get_registry),
) -> Response:
    model = registry.get(model_name, model_version)
    plan = prepare(body, model, stream_default=False, limits=request.app.state.limits)
    if plan.stream:
        raise InvalidRequestError(
            "stream: streaming is not supported by /generate; use /generate_stream"
        )
    try:
        result = await until_disconnect(request, generate_response(model, plan))
    except ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return JSONResponse(result)


@router.post(
    "/v2/models/{model_name}/generate_stream",
    summary="Generate text as Server-Sent Events",
    response_class=EventSourceResponse,
    responses={200: STREAM_RESPONSE, **ERROR_RESPONSES},
    openapi_extra=STREAM_REQUEST_BODY,
)
@router.post(
    "/v2/models/{model_name}/versions/{model_version}/generate_stream",
    summary="Generate text with a given model version as Server-Sent Events",
    response_class=EventSourceResponse,
    responses={200: STREAM_RESPONSE, **ERROR_RESPONSES},
    openapi_extra=STREAM_REQUEST_BODY,
)
async def generate_stream(
    model_name: str,
    request: Request,
    model_version: str | None = None,
    body: GenerateRequest = Depends(generate_request_body),
    registry: ModelRegistry = Depends(get_registry),
) -> Response:
    """Triton's `generate_stream`: one `data: {json}` event per engine step."""
    return await open_stream(request, registry.get(model_name, model_version), body, TRITON_FRAMING)


@router.get(
    "/v2/models/{model_name}/generate_stream",
    summary="Generate text as Server-Sent Events, for a browser EventSource (query parameters)",
    description=EVENT_SOURCE_DESCRIPTION,
    response_class=EventSourceResponse,
    responses={200: EVENT_SOURCE_RESPONSE, **ERROR_RESPONSES},
    openapi_extra={"parameters": QUERY_PARAMETERS},
)
async def generate_stream_get(
    model_name: str, request: Request, registry: ModelRegistry = Depends(get_registry)
) -> Response:
    """The same stream from query parameters, for `EventSource`."""
    return await event_source_stream(request, registry, model_name, None)


@router.get(
    "/v2/models/{model_name}/versions/{model_version}/generate_stream",
    summary="Generate text with a given model version as Server-Sent Events, for a browser EventSource",
    description=EVENT_SOURCE_DESCRIPTION,
    response_class=EventSourceResponse,
    responses={200: EVENT_SOURCE_RESPONSE, **ERROR_RESPONSES},
    openapi_extra={"parameters": QUERY_PARAMETERS},
)
async def generate_stream_get_version(
    model_name: str,
    model_version: str,
    request: Request,
    registry: ModelRegistry = Depends(get_registry),
) -> Response:
    """The same stream of one model version from query parameters, for `EventSource`."""
    return await event_source_stream(request, registry, model_name, model_version)


async def event_source_stream(
    request: Request, registry: ModelRegistry, model_name: str, model_version: str | None
) -> Response:
    """The POST stream built from the query string, ending with `event: end`. Errors before
    the first event are an `event: error` when Accept names `text/event-stream`
    (an `EventSource` cannot read a 4xx body) and a JSON error with its status otherwise."""
    try:
        body = generate_request_from_query(request.query_params)
        model = registry.get(model_name, model_version)
        return await open_stream(request, model, body, EVENT_SOURCE_FRAMING)
    except ServerError as exc:
        if not accepts_event_stream(request):
            raise
        return error_event_stream(exc)


async def open_stream(
    request: Request, model: ServedModel, body: GenerateRequest, framing: Framing
) -> Response:
    """Validate, start the engine request and wait for its first event, so that errors
    before it are answered with their status; then stream the rest."""
    plan = prepare(body, model, stream_default=True, limits=request.app.state.limits)
    events = stream_deltas(model, plan)
    try:
        first = await until_disconnect(request, anext(events))
    except ClientDisconnected:
        await events.aclose()
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    except BaseException:
        await events.aclose()
        raise
    return EventStream(
        sse_frames(first, events, framing),
        sep="\n",
        ping=request.app.state.settings.sse_ping_seconds,
    )


def accepts_event_stream(request: Request) -> bool:
    """True for an `EventSource` (it always sends `Accept: text/event-stream`)."""
    return "text/event-stream" in request.headers.get("accept", "")


class ClientDisconnected(Exception):
    """The client went away before the response was ready."""


async def until_disconnect(request: Request, awaitable: Awaitable[T]) -> T:
    """Await `awaitable`, cancelling it (and so aborting its engine request) if the client leaves."""
    work = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            return work.result()
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        raise ClientDisconnected()
    finally:
        watcher.cancel()
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)


async def wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
