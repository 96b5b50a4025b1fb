"""KServe v2 health routes, and vLLM's `GET /health`."""

from __future__ import annotations

from fastapi import APIRouter

from app.http.health import add_health_route, engines_can_serve
from app.routes.openapi_examples import READY_RESPONSES

router = APIRouter(tags=["health"])

add_health_route(
    router,
    "/v2/health/live",
    "live",
    lambda registry: registry.is_live,
    summary="Is the server process alive",
    responses={
        200: {"description": "Alive (empty body)"},
        503: {
            "description": "A model's engine failed and its restarts are exhausted"
            ": restart the server"
        },
    },
)
add_health_route(
    router,
    "/v2/health/ready",
    "ready",
    lambda registry: registry.is_ready,
    summary="Are all models ready to take requests",
    responses=READY_RESPONSES,
)
add_health_route(
    router,
    "/health",
    "engines_healthy",
    engines_can_serve,
    summary="Can every engine serve (vLLM's health route)",
    responses={
        200: {"description": "Every loaded model's engine can serve (empty body)"},
        503: {"description": "An engine failed, is restarting or is not started yet"},
    },
)
