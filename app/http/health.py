"""The health routes of both frontends: an empty 200 while a check of the registry holds,
else 503."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from app.http.dependencies import RegistryDep
from app.repository.registry import ModelRegistry
from app.security.restrictions import ApiGroup, api_group

__all__ = ["add_health_route", "engines_can_serve"]


def engines_can_serve(registry: ModelRegistry) -> bool:
    """The server is live and every loaded model's engine can serve (vLLM's /health, /ping)."""
    return registry.is_live and all(model.is_healthy for model in registry)


def add_health_route(
    router: APIRouter,
    path: str,
    name: str,
    healthy: Callable[[ModelRegistry], bool],
    methods: Sequence[str] = ("GET",),
    **options: Any,
) -> None:
    """Add the route `name` at `path` (a route for each of `methods`), in the `health` API
    group, answering 200 while `healthy(registry)` and 503 otherwise, with an empty body;
    `options`: FastAPI's route options."""

    @api_group(ApiGroup.HEALTH)
    async def check(registry: RegistryDep) -> Response:
        return Response(status_code=200 if healthy(registry) else 503)

    for method in methods:
        router.add_api_route(
            path, check, methods=[method], name=name, response_class=Response, **options
        )
