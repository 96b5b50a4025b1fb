"""Validation of wire data against the schemas, with errors that name each field."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.errors import InvalidRequestError

Model = TypeVar("Model", bound=BaseModel)


def format_validation_errors(errors: Sequence[Any], location: str = "") -> str:
    """One readable line per pydantic error, each naming its field (under `location`)."""
    lines = []
    for error in errors:
        parts = [part for part in field_path(error.get("loc", ())) if part != "body"]
        field = ".".join(([location] if location else []) + parts) or location or "body"
        lines.append(f"{field}: {error.get('msg', 'invalid value')}")
    return "; ".join(lines)


def field_path(location: Sequence[Any]) -> list[str]:
    """A pydantic error's location less its tags for wrapping validators (`function-wrap[...]`)."""
    return [str(part) for part in location if not str(part).startswith("function-")]


def invalid_request(exc: ValidationError, location: str = "") -> InvalidRequestError:
    return InvalidRequestError(format_validation_errors(exc.errors(), location))


def validate_json(model: type[Model], raw: bytes | str) -> Model:
    """Parse JSON text as `model`, or a 400 naming the fields."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid_request(exc) from exc


def validate_data(
    model: type[Model], data: Any, location: str = "", strict: bool | None = None
) -> Model:
    """Validate Python data as `model`, or a 400 naming the fields under `location`."""
    try:
        return model.model_validate(data, strict=strict)
    except ValidationError as exc:
        raise invalid_request(exc, location) from exc


def json_text(text: str, location: str) -> Any:
    """JSON carried inside a string field, or a 400 naming the field (a lone surrogate
    escaped in it too)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"{location}: invalid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequestError(f"{location}: JSON nested too deeply") from exc
    if may_hold_surrogates(text):
        check_unicode(value, location)
    return value


def json_object_text(text: str, location: str) -> dict[str, Any]:
    """A JSON object carried inside a string field, or a 400 naming the field."""
    value = json_text(text, location)
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{location}: must be a JSON object")
    return value


def check_unicode(data: Any, location: str = "") -> None:
    """Refuse, naming the field, a string of parsed JSON that no UTF-8 can carry (a lone
    surrogate such as `"\\ud800"`, which Python's JSON parser lets through): O(size) once,
    so that no tokenizer, matcher or encoder downstream meets one."""
    stack: list[tuple[Any, str]] = [(data, location)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and not encodable(value):
                field = path or "body"
                raise InvalidRequestError(
                    f"{field}: not valid Unicode text (a lone surrogate)", param=field
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                stack.append((key, path))  # a key at fault names the object that holds it
                stack.append((item, f"{path}.{key}" if path else str(key)))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(value))


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate (`\\ud800`): the only way ASCII JSON text parses to
one."""
SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def may_hold_surrogates(text: str | bytes) -> bool:
    """Whether JSON `text` can parse to a string holding a surrogate: not when it is ASCII
    without a surrogate's escape (one scan in C, where `check_unicode` walks every string)."""
    if not text.isascii():
        return True
    if isinstance(text, bytes):
        return SURROGATE_ESCAPE_BYTES.search(text) is not None
    return SURROGATE_ESCAPE.search(text) is not None


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
