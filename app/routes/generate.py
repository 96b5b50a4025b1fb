"""Triton's generate extension: `generate` and `generate_stream`, with and without a version,
plus a GET `generate_stream` for browsers' `EventSource`; and KServe's `infer`, which Triton
refuses for the backend's models (decoupled)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from app.errors import NotSupportedError, ServerError
from app.http.dependencies import RegistryDep
from app.http.disconnect import CLIENT_CLOSED_REQUEST
from app.http.sse import EventStream
from app.repository.served_model import ServedModel
from app.routes.bodies import GenerateBody
from app.routes.model_routes import model_routes
from app.routes.openapi_examples import (
    ERROR_RESPONSES,
    EVENT_SOURCE_DESCRIPTION,
    EVENT_SOURCE_RESPONSE,
    GENERATE_REQUEST_BODY,
    GENERATE_RESPONSE,
    NOT_FOUND,
    QUERY_EXAMPLES,
    STREAM_REQUEST_BODY,
    STREAM_RESPONSE,
    error_response,
)
from app.routes.query import generate_request_from_query, query_parameters_openapi
from app.routes.responses import GenerationContext, GenerationContextDep, open_responses
from app.routes.sse import (
    EVENT_SOURCE_FRAMING,
    TRITON_FRAMING,
    Framing,
    error_event_stream,
    sse_frames,
)
from app.schemas.generate import GenerateRequest, GenerateResponse
from app.security.restrictions import ApiGroup, api_group
from app.triton.request import StreamPolicy

router = APIRouter(tags=["generate"])

QUERY_PARAMETERS = query_parameters_openapi(QUERY_EXAMPLES)
ONE_RESPONSE = StreamPolicy(
    default=False, refusal="stream: streaming is not supported by /generate; use /generate_stream"
)
STREAM = StreamPolicy(default=True)
DECOUPLED_INFER_MESSAGE = "HTTP end point doesn't support models with decoupled transaction policy"
"""Triton's answer (501) to `infer` on a decoupled model, as every model of its vLLM backend
is (gRPC's ModelInfer has its own text: app/grpc/status.py)."""
INFER_RESPONSES: dict[int | str, dict[str, Any]] = {
    501: error_response("The model is decoupled: use generate", DECOUPLED_INFER_MESSAGE),
    **NOT_FOUND,
}


Answer = Callable[[GenerationContext, ServedModel, GenerateRequest], Awaitable[Response]]
"""How a POST route answers its body for the model (version) its path names."""


def add_generate_routes(
    action: str, name: str, answer: Answer, summaries: tuple[str, str], **options: Any
) -> None:
    """Add the POST route `name` at a model's `action` and a version's (`model_routes`), in
    the `inference` API group, answering its body with `answer`; `options`: FastAPI's."""

    @api_group(ApiGroup.INFERENCE)
    async def generate(
        model_name: str,
        body: GenerateBody,
        context: GenerationContextDep,
        model_version: str | None = None,
    ) -> Response:
        return await answer(context, context.model(model_name, model_version), body)

    model_routes(router, "POST", action, summaries, name=name, **options)(generate)


async def one_response(
    context: GenerationContext, model: ServedModel, body: GenerateRequest
) -> Response:
    """Triton's `generate`: the whole answer as one JSON response."""
    responses = await open_responses(context, model, body, ONE_RESPONSE)
    if responses is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    first, rest = responses
    await rest.aclose()
    return JSONResponse(first)


async def triton_stream(
    context: GenerationContext, model: ServedModel, body: GenerateRequest
) -> Response:
    return await event_stream(context, model, body, TRITON_FRAMING)


add_generate_routes(
    "/generate",
    "generate",
    one_response,
    (
        "Generate text (one JSON response)",
        "Generate text with a given model version (one JSON response)",
    ),
    response_model=GenerateResponse,
    responses={200: GENERATE_RESPONSE, **ERROR_RESPONSES},
    openapi_extra=GENERATE_REQUEST_BODY,
)
add_generate_routes(
    "/generate_stream",
    "generate_stream",
    triton_stream,
    (
        "Generate text as Server-Sent Events",
        "Generate text with a given model version as Server-Sent Events",
    ),
    description="Triton's `generate_stream`: one `data: {json}` event per engine step.",
    response_class=EventSourceResponse,
    responses={200: STREAM_RESPONSE, **ERROR_RESPONSES},
    openapi_extra=STREAM_REQUEST_BODY,
)


@model_routes(
    router,
    "GET",
    "/generate_stream",
    (
        "Generate text as Server-Sent Events, for a browser EventSource (query parameters)",
        "Generate text with a given model version as Server-Sent Events, for a browser EventSource",
    ),
    description=EVENT_SOURCE_DESCRIPTION,
    response_class=EventSourceResponse,
    responses={200: EVENT_SOURCE_RESPONSE, **ERROR_RESPONSES},
    openapi_extra={"parameters": QUERY_PARAMETERS},
)
@api_group(ApiGroup.INFERENCE)
async def generate_stream_get(
    model_name: str, context: GenerationContextDep, model_version: str | None = None
) -> Response:
    """The same stream from query parameters, for `EventSource`: the POST stream built from
    the query string, ending with `event: end`. Errors before the stream starts are an
    `event: error` when Accept names `text/event-stream` (an `EventSource` cannot read a 4xx
    body) and a JSON error with its status otherwise."""
    try:
        body = generate_request_from_query(context.request.query_params)
        model = context.model(model_name, model_version)
        return await event_stream(context, model, body, EVENT_SOURCE_FRAMING)
    except ServerError as exc:
        if not accepts_event_stream(context.request):
            raise
        return error_event_stream(exc)


async def event_stream(
    context: GenerationContext, model: ServedModel, body: GenerateRequest, framing: Framing
) -> Response:
    """Errors until the engine has accepted the request are answered with their status; then
    the stream starts (before the first token: its headers are not on the first token's way)."""
    responses = await open_responses(context, model, body, STREAM)
    if responses is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    first, rest = responses
    return EventStream(sse_frames(first, rest, framing), context.ping_seconds)


def accepts_event_stream(request: Request) -> bool:
    """True for an `EventSource` (it always sends `Accept: text/event-stream`)."""
    return "text/event-stream" in request.headers.get("accept", "")


@model_routes(
    router,
    "POST",
    "/infer",
    (
        "KServe inference: refused, as Triton does for its vLLM models (use generate)",
        "KServe inference of a model version: refused (use generate)",
    ),
    response_class=Response,
    responses=INFER_RESPONSES,
)
@api_group(ApiGroup.INFERENCE)
async def infer(model_name: str, registry: RegistryDep, model_version: str | None = None) -> None:
    """Triton's answer for a decoupled model (404 for an unknown one); the body is not read."""
    registry.get(model_name, model_version)
    raise NotSupportedError(DECOUPLED_INFER_MESSAGE)
