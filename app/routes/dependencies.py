"""Request-scoped helpers shared by the routers."""

from __future__ import annotations

from fastapi import Request
from pydantic import ValidationError

from app.engine.registry import ModelRegistry
from app.errors import InvalidRequestError, format_validation_errors
from app.schemas.generate import GenerateRequest


def get_registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


async def generate_request_body(request: Request) -> GenerateRequest:
    """Parse the body as JSON whatever its Content-Type (curl -d sends a form type)."""
    body = await request.body()
    if not body.strip():
        raise InvalidRequestError("request body is empty: expected a JSON object")
    try:
        return GenerateRequest.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(format_validation_errors(exc.errors())) from exc
