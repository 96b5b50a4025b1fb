"""The OpenAI-compatible routes: models, completions, chat completions and responses."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.errors import ModelNotFoundError
from app.http.dependencies import GenerationDep, RegistryDep, RequestLogDep
from app.openai.examples import (
    CHAT_BODY,
    CHAT_RESPONSES,
    COMPLETION_BODY,
    COMPLETION_RESPONSES,
    NOT_FOUND,
    RESPONSE_BODY,
    RESPONSE_RESPONSES,
)
from app.openai.generation import OpenAIContext, respond
from app.openai.models import model_card_for, model_cards
from app.openai.schemas import ModelCard, ModelList
from app.schemas.openai import OpenAIEndpoint
from app.security.restrictions import ApiGroup, api_group

PREFIX = "/v1"
router = APIRouter(prefix=PREFIX, tags=["openai"])


@router.get(
    "/models", summary="The models, versions and LoRA adapters served", response_model=ModelList
)
@api_group(ApiGroup.MODEL_REPOSITORY)
async def list_models(registry: RegistryDep) -> dict[str, Any]:
    return {"object": "list", "data": model_cards(registry)}


@router.get(
    "/models/{model_id:path}",
    summary="One model, version or LoRA adapter",
    response_model=ModelCard,
    responses=NOT_FOUND,
)
@api_group(ApiGroup.MODEL_REPOSITORY)
async def retrieve_model(model_id: str, registry: RegistryDep) -> dict[str, Any]:
    return model_card_for(registry, model_id)


def add_generating_route(
    path: str, name: str, endpoint: OpenAIEndpoint, summary: str, **options: Any
) -> None:
    """Add the POST route `name` at `path` that answers `endpoint`'s calls (JSON, or a stream),
    in the `inference` API group; `options`: FastAPI's route options."""

    @api_group(ApiGroup.INFERENCE)
    async def generate(
        request: Request, registry: RegistryDep, generation: GenerationDep, log: RequestLogDep
    ) -> Response:
        return await respond(OpenAIContext(request, generation, log), registry, endpoint)

    router.add_api_route(
        path, generate, methods=["POST"], name=name, summary=summary, response_model=None, **options
    )


add_generating_route(
    "/completions",
    "completions",
    OpenAIEndpoint.COMPLETIONS,
    "Complete a prompt (JSON, or Server-Sent Events with `stream: true`)",
    responses=COMPLETION_RESPONSES,
    openapi_extra=COMPLETION_BODY,
)
add_generating_route(
    "/chat/completions",
    "chat_completions",
    OpenAIEndpoint.CHAT_COMPLETIONS,
    "Answer a conversation (JSON, or Server-Sent Events with `stream: true`)",
    responses=CHAT_RESPONSES,
    openapi_extra=CHAT_BODY,
)
add_generating_route(
    "/responses",
    "create_response",
    OpenAIEndpoint.RESPONSES,
    "Answer an input with OpenAI's Responses API (JSON, or Server-Sent Events with "
    "`stream: true`); nothing is stored",
    responses=RESPONSE_RESPONSES,
    openapi_extra=RESPONSE_BODY,
)


NOT_STORED = (
    "Response '{}' not found: this server does not store responses (`store` is always "
    "false), so they cannot be retrieved, cancelled or continued"
)


@router.get("/responses/{response_id}", include_in_schema=False)
@api_group(ApiGroup.INFERENCE)
async def retrieve_response(response_id: str) -> Response:
    raise ModelNotFoundError(NOT_STORED.format(response_id[:256]), param="response_id")


@router.post("/responses/{response_id}/cancel", include_in_schema=False)
@api_group(ApiGroup.INFERENCE)
async def cancel_response(response_id: str) -> Response:
    raise ModelNotFoundError(NOT_STORED.format(response_id[:256]), param="response_id")
