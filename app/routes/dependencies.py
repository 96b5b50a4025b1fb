"""Request-scoped helpers shared by the routers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from app.engine.registry import ModelRegistry
from app.errors import InvalidRequestError, format_validation_errors
from app.schemas.generate import GenerateRequest

BodyModel = TypeVar("BodyModel", bound=BaseModel)


def get_registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


async def parse_json_body(request: Request, model: type[BodyModel]) -> BodyModel | None:
    """Parse the body as JSON whatever its Content-Type: curl -d sends a form type and
    tritonclient sends none. An empty body is None."""
    body = await request.body()
    if not body.strip():
        return None
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(format_validation_errors(exc.errors())) from exc


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
