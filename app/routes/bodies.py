"""Request bodies read by hand as JSON, whatever their Content-Type (curl -d sends a form type,
tritonclient none), as FastAPI dependencies: Triton's generate body and the optional
bodies of the repository extension; the logging and trace extensions' settings. The runtime's
parts are app/http/dependencies.py's."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from pydantic import BaseModel

from app.errors import InvalidRequestError
from app.http.parsing import parsed
from app.schemas.generate import GenerateRequest
from app.schemas.validation import validate_json

BodyModel = TypeVar("BodyModel", bound=BaseModel)


async def parse_json_body(request: Request, model: type[BodyModel]) -> BodyModel | None:
    """Parse the body as JSON whatever its Content-Type: curl -d sends a form type and
    tritonclient sends none. An empty body is None."""
    body = await request.body()
    if not body.strip():
        return None
    return await parsed(partial(validate_json, model), body)


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


def settings_object(body: bytes, kind: str) -> dict[str, Any]:
    """A body of `kind` settings (log, trace) as Triton's extensions read it: a JSON object,
    with Triton's message for one that is not JSON; an empty body changes nothing."""
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"failed to parse the request JSON buffer: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidRequestError(f"the request body must be a JSON object of {kind} settings")
    return data
