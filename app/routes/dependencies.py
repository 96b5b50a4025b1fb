"""Typed dependencies of the routes: the runtime's parts, settings, the request's log, bodies.

All are `async def`: FastAPI runs a plain `def` dependency in a worker thread, which costs
tens of microseconds per request for what is an attribute read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from pydantic import BaseModel

from app.core.service import GenerationService
from app.errors import InvalidRequestError
from app.http.access_log import current_request
from app.observability.access_log import RequestLog
from app.repository.registry import ModelRegistry
from app.runtime import Runtime
from app.schemas.generate import GenerateRequest
from app.schemas.validation import validate_json
from app.settings import Settings

BodyModel = TypeVar("BodyModel", bound=BaseModel)


async def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


async def get_registry(runtime: Annotated[Runtime, Depends(get_runtime)]) -> ModelRegistry:
    return runtime.registry


async def get_generation(runtime: Annotated[Runtime, Depends(get_runtime)]) -> GenerationService:
    return runtime.generation


async def get_request_log() -> RequestLog | None:
    """The access-log record of this request (None outside the access-log middleware)."""
    return current_request.get()


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
GenerationDep = Annotated[GenerationService, Depends(get_generation)]
RequestLogDep = Annotated[RequestLog | None, Depends(get_request_log)]


async def parse_json_body(request: Request, model: type[BodyModel]) -> BodyModel | None:
    """Parse the body as JSON whatever its Content-Type: curl -d sends a form type and
    tritonclient sends none. An empty body is None."""
    body = await request.body()
    if not body.strip():
        return None
    return validate_json(model, body)


def optional_json_body(model: type[BodyModel]) -> Callable[[Request], Awaitable[BodyModel | None]]:
    """A dependency reading an optional JSON body as `model`."""

    async def dependency(request: Request) -> BodyModel | None:
        return await parse_json_body(request, model)

    return dependency


async def generate_request_body(request: Request) -> GenerateRequest:
    body = await parse_json_body(request, GenerateRequest)
    if body is None:
        raise InvalidRequestError("request body is empty: expected a JSON object")
    return body


GenerateBody = Annotated[GenerateRequest, Depends(generate_request_body)]
