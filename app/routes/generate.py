"""Triton's generate extension: `generate` and `generate_stream`, with and without a version."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from app.engine.generation import generate_response, prepare, stream_deltas
from app.engine.registry import ModelRegistry
from app.errors import InvalidRequestError, ServerError, error_body
from app.routes.dependencies import generate_request_body, get_registry
from app.routes.sse import EventStream
from app.schemas.generate import ErrorResponse, GenerateRequest, GenerateResponse

logger = logging.getLogger(__name__)
router = APIRouter(tags=["generate"])

T = TypeVar("T")
CLIENT_CLOSED_REQUEST = 499
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Invalid request body or parameters"},
    404: {"model": ErrorResponse, "description": "Unknown model or version"},
    503: {"model": ErrorResponse, "description": "Model unavailable"},
}
REQUEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/GenerateRequest"}}},
    }
}


@router.post(
    "/v2/models/{model_name}/generate",
    summary="Generate text (one JSON response)",
    response_model=GenerateResponse,
    responses=ERROR_RESPONSES,
    openapi_extra=REQUEST_BODY,
)
@router.post(
    "/v2/models/{model_name}/versions/{model_version}/generate",
    summary="Generate text with a given model version (one JSON response)",
    response_model=GenerateResponse,
    responses=ERROR_RESPONSES,
    openapi_extra=REQUEST_BODY,
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
    responses={200: {"content": {"text/event-stream": {}}}, **ERROR_RESPONSES},
    openapi_extra=REQUEST_BODY,
)
@router.post(
    "/v2/models/{model_name}/versions/{model_version}/generate_stream",
    summary="Generate text with a given model version as Server-Sent Events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}, **ERROR_RESPONSES},
    openapi_extra=REQUEST_BODY,
)
async def generate_stream(
    model_name: str,
    request: Request,
    model_version: str | None = None,
    body: GenerateRequest = Depends(generate_request_body),
    registry: ModelRegistry = Depends(get_registry),
) -> Response:
    model = registry.get(model_name, model_version)
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
        sse_frames(first, events),
        sep="\n",
        ping=request.app.state.settings.sse_ping_seconds,
    )


async def sse_frames(
    first: dict[str, Any], events: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[bytes]:
    """`data:` frames of compact JSON; an error after the first event becomes an error frame."""
    try:
        yield data_frame(first)
        async for event in events:
            yield data_frame(event)
    except ServerError as exc:
        yield data_frame(error_body(exc.message))
    except Exception as exc:
        logger.exception("stream failed after its first event")
        yield data_frame(error_body(f"Error generating stream: {exc}"))
    finally:
        await events.aclose()  # type: ignore[attr-defined]


JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def data_frame(payload: dict[str, Any]) -> bytes:
    """One SSE event, `data: {json}\n\n`, as bytes sse-starlette sends unchanged.

    Compact JSON escapes every line break, so the payload is always one `data:` line. Built
    here once per event with a shared encoder: cheaper than `json.dumps` with options plus
    sse-starlette's generic `ServerSentEvent` formatting of a dict, on the per-token path.
    """
    return b"data: " + JSON_ENCODER.encode(payload).encode() + b"\n\n"


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
