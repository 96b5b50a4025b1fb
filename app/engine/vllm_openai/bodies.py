"""OpenAI request bodies read by vLLM's own request models, every fault a 400 naming its field.

vLLM's models check the raw body in "before" validators that assume each field has its
declared type; one of the wrong type (`structured_outputs: []`) makes them raise an
`AttributeError` or `TypeError` rather than a validation error. Such a body is checked again
against the same fields without those validators, which names the field."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from app.engine.vllm_openai.compat import create_error_response
from app.errors import InvalidRequestError, ServerError
from app.schemas.validation import field_path, format_validation_errors


def parse(request_class: type[BaseModel], body: dict[str, Any]) -> Any:
    """The body as vLLM's request model, or a 400 naming the field."""
    try:
        return request_class.model_validate(body)
    except ValidationError as exc:
        raise invalid(exc) from exc
    except Exception as exc:  # vLLM's "before" validators, failing on a field of the wrong type
        raise unreadable(request_class, body, exc) from exc


def invalid(exc: ValidationError) -> InvalidRequestError:
    """Pydantic's errors as a 400 whose `param` is the first field at fault."""
    errors = exc.errors()
    param = ".".join(field_path(errors[0].get("loc", ()))) if errors else ""
    return InvalidRequestError(format_validation_errors(errors), param=param or None)


def unreadable(request_class: type[BaseModel], body: dict[str, Any], exc: Exception) -> ServerError:
    """A body vLLM's validators failed on: the field of the wrong type when the fields alone
    show it, else vLLM's own answer, which is a 400 (the body is all there was to read)."""
    try:
        fields_of(request_class).model_validate(body)
    except ValidationError as fault:
        return invalid(fault)
    except Exception:  # noqa: BLE001 - a nested model's validator failed the same way
        pass
    error = create_error_response(exc).error
    status = int(error.code)
    message = (
        error.message if 400 <= status < 500 else f"vLLM could not read the request body: {exc}"
    )
    return InvalidRequestError(message, param=error.param)


@functools.cache
def fields_of(request_class: type[BaseModel]) -> type[BaseModel]:
    """A model with `request_class`'s fields and none of its model validators."""
    fields = {name: (info.annotation, info) for name, info in request_class.model_fields.items()}
    config = ConfigDict(extra="allow", arbitrary_types_allowed=True)
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{request_class.__name__}Fields", __config__=config, **fields
    )
    return model
