"""vLLM's utility routes, as `vllm serve` answers them: `GET|POST /ping`, `GET /version`,
`POST /tokenize`, `POST /detokenize` (per model: the body's `model`), and with
VLLM_ALLOW_RUNTIME_LORA_UPDATING `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`.

Restricted API groups: /ping is `health`, /version `metadata`, /tokenize and /detokenize
`inference`, the LoRA routes `model-repository` (each declares it: `api_group`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response

from app.engine.version import vllm_version
from app.errors import InvalidRequestError, ModelUnavailableError, NotSupportedError
from app.http.dependencies import GenerationDep, RegistryDep, RequestLogDep
from app.http.errors import ErrorBodies
from app.http.health import add_health_route, engines_can_serve
from app.observability.access_log import RequestLog
from app.openai.errors import openai_error_body
from app.openai.generation import read_body, target_of
from app.openai.limits import check_conversation
from app.openai.models import Target
from app.openai.serving import OpenAIUtility, openai_serving, openai_servings
from app.openai.utility_examples import (
    DETOKENIZE_BODY,
    DETOKENIZE_RESPONSES,
    LOAD_BODY,
    LOAD_RESPONSES,
    LORA_REFUSED,
    TOKENIZE_BODY,
    TOKENIZE_RESPONSES,
    UNLOAD_RESPONSES,
    VERSION_RESPONSES,
)
from app.repository.registry import ModelRegistry
from app.security.restrictions import ApiGroup, api_group

SEVERAL_PROCESSES = "runtime LoRA adapters need FRONTEND_PROCESSES=1"
router = APIRouter()
lora_router = APIRouter(prefix="/v1", tags=["openai"])


add_health_route(
    router,
    "/ping",
    "ping",
    engines_can_serve,
    methods=("POST", "GET"),
    tags=["health"],
    summary="Can every engine serve (vLLM's ping)",
    description="200 while every loaded model's engine can serve, else 503 (as GET /health).",
)


@router.get(
    "/version",
    tags=["openai"],
    summary="The vLLM release serving the models",
    responses=VERSION_RESPONSES,
)
@api_group(ApiGroup.METADATA)
async def version() -> dict[str, str]:
    return {"version": vllm_version()}


TokenCall = Callable[[OpenAIUtility, dict[str, Any], str | None], Awaitable[dict[str, Any]]]
"""A call of a model's utility API with the body and the adapter it names."""


def add_token_route(path: str, name: str, call: TokenCall, summary: str, **options: Any) -> None:
    """Add the POST route `name` at `path` that answers `call` for the body's model, in the
    `inference` API group; `options`: FastAPI's route options."""

    @api_group(ApiGroup.INFERENCE)
    async def answer(
        request: Request, registry: RegistryDep, generation: GenerationDep, log: RequestLogDep
    ) -> dict[str, Any]:
        body = await read_body(request)
        check_conversation(body, generation.limits)
        target = target_of(registry, body)
        return await call(utility_of(target, log), body, target.adapter)

    router.add_api_route(
        path,
        answer,
        methods=["POST"],
        name=name,
        tags=["openai"],
        summary=summary,
        **options,
    )


add_token_route(
    "/tokenize",
    "tokenize",
    lambda utility, body, adapter: utility.tokenize(body, adapter),
    "A prompt or chat messages as token ids",
    responses=TOKENIZE_RESPONSES,
    openapi_extra=TOKENIZE_BODY,
)
add_token_route(
    "/detokenize",
    "detokenize",
    lambda utility, body, adapter: utility.detokenize(body, adapter),
    "Token ids as text",
    responses=DETOKENIZE_RESPONSES,
    openapi_extra=DETOKENIZE_BODY,
)


@lora_router.post(
    "/load_lora_adapter",
    summary="Load a LoRA adapter at run time",
    response_class=Response,
    responses=LOAD_RESPONSES,
    openapi_extra=LOAD_BODY,
)
@api_group(ApiGroup.MODEL_REPOSITORY, changes_state=True)
async def load_lora_adapter(
    request: Request, registry: RegistryDep, log: RequestLogDep
) -> Response:
    body = await read_body(request)
    utilities = base_model_utilities(registry, body, log)
    if not utilities[0].lora_enabled:
        raise InvalidRequestError(
            "model: its engine was not started with LoRA (enable_lora)", param="model"
        )
    answers = [await utility.load_lora_adapter(body) for utility in utilities]
    return Response(answers[0])


@lora_router.post(
    "/unload_lora_adapter",
    summary="Unload a LoRA adapter loaded at run time",
    response_class=Response,
    responses=UNLOAD_RESPONSES,
)
@api_group(ApiGroup.MODEL_REPOSITORY, changes_state=True)
async def unload_lora_adapter(
    request: Request, registry: RegistryDep, log: RequestLogDep
) -> Response:
    body = await read_body(request)
    utilities = base_model_utilities(registry, body, log)
    answers = [await utility.unload_lora_adapter(body) for utility in utilities]
    return Response(answers[0])


def utility_of(target: Target, log: RequestLog | None) -> OpenAIUtility:
    """The utility API of the model version `target` names (503 while it is not started)."""
    if log is not None:
        log.model, log.version = target.model.name, target.model.version
    serving = openai_serving(target.model)
    if serving is None:
        raise ModelUnavailableError(f"Model '{target.model.name}' is not started")
    return serving.utility


def base_model_utilities(
    registry: ModelRegistry, body: dict[str, Any], log: RequestLog | None
) -> list[OpenAIUtility]:
    """A LoRA route's model (the body's `model`, a base model, or the one model served): the
    utility API of each of its instances, every one of which takes the adapter."""
    target = target_of(registry, body)
    if target.adapter is not None:
        raise InvalidRequestError("model: name the base model, not an adapter", param="model")
    utility_of(target, log)  # 503 while it is not started
    return [serving.utility for serving in openai_servings(target.model)]


def install(app: FastAPI, errors: ErrorBodies, runtime_lora: bool, one_process: bool) -> None:
    """The utility routes; the LoRA ones only with `runtime_lora` (refused 501 where several
    frontend processes would each know only their own adapters)."""
    for path in ("/tokenize", "/detokenize"):
        errors.add(path, openai_error_body)
    app.include_router(router)
    if runtime_lora:
        app.include_router(lora_router if one_process else refuse_runtime_lora(SEVERAL_PROCESSES))


def refuse_runtime_lora(reason: str) -> APIRouter:
    """The LoRA routes answering 501 with `reason` (where adapters cannot be loaded at run time)."""
    refusing = APIRouter(prefix="/v1", tags=["openai"])

    @api_group(ApiGroup.MODEL_REPOSITORY, changes_state=True)
    async def refuse() -> Response:
        raise NotSupportedError(reason)

    for path in ("/load_lora_adapter", "/unload_lora_adapter"):
        refusing.add_api_route(
            path,
            refuse,
            methods=["POST"],
            summary="Runtime LoRA adapters (refused here)",
            response_class=Response,
            responses=LORA_REFUSED,
        )
    return refusing
