"""KServe v2 health routes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.http.dependencies import RegistryDep
from app.routes.openapi_examples import READY_RESPONSES
from app.security.restrictions import ApiGroup, api_group

router = APIRouter(tags=["health"])


@router.get(
    "/v2/health/live",
    summary="Is the server process alive",
    response_class=Response,
    responses={
        200: {"description": "Alive (empty body)"},
        503: {
            "description": "A model's engine failed and its restarts are exhausted"
            ": restart the server"
        },
    },
)
@api_group(ApiGroup.HEALTH)
async def live(registry: RegistryDep) -> Response:
    return Response(status_code=200 if registry.is_live else 503)


@router.get(
    "/v2/health/ready",
    summary="Are all models ready to take requests",
    response_class=Response,
    responses=READY_RESPONSES,
)
@api_group(ApiGroup.HEALTH)
async def ready(registry: RegistryDep) -> Response:
    return Response(status_code=200 if registry.is_ready else 503)


@router.get(
    "/health",
    summary="Can every engine serve (vLLM's health route)",
    response_class=Response,
    responses={
        200: {"description": "Every loaded model's engine can serve (empty body)"},
        503: {"description": "An engine failed, is restarting or is not started yet"},
    },
)
@api_group(ApiGroup.HEALTH)
async def engines_healthy(registry: RegistryDep) -> Response:
    healthy = registry.is_live and all(model.is_healthy for model in registry)
    return Response(status_code=200 if healthy else 503)
