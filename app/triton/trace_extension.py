"""Triton's trace extension on every protocol (HTTP `/v2[/models/<m>]/trace/setting`, gRPC
`TraceSetting`): the request's settings read with Triton's rules and messages, applied to the
global or a model's setting, and every setting answered."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from app.errors import (
    InvalidRequestError,
    ModelNotFoundError,
    ModelUnavailableError,
    NotSupportedError,
)
from app.observability.trace_config import TENSORS, TIMESTAMPS
from app.observability.trace_settings import TraceSettings
from app.repository.registry import ModelRegistry

Asked = TypeVar("Asked")
FILE_REFUSAL = "trace file location can not be updated through network protocol"
"""Triton's answer (501 / UNIMPLEMENTED) to a request that sets `trace_file`."""
NOT_SUPPORTED = "the server does not support tracing"
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
LEADING_INTEGER = re.compile(r"\s*([+-]?\d+)")
"""What `std::stoi` reads of a string (trailing text is ignored, as there)."""
SETTING_NAMES = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
}


def check_model(registry: ModelRegistry, model: str) -> None:
    """Triton's refusal of a model that is not ready (in any version)."""
    if not model:
        return
    try:
        ready = registry.get(model, "").is_ready
    except (ModelNotFoundError, ModelUnavailableError):
        ready = False
    if not ready:
        raise InvalidRequestError(f"Request for unknown model : {model}")


def settings_of(settings: TraceSettings | None) -> TraceSettings:
    if settings is None:
        raise ModelUnavailableError(NOT_SUPPORTED)
    return settings


def levels(values: Sequence[str]) -> frozenset[str] | None:
    """Triton's reading of `trace_level`'s strings: OFF alone, or TIMESTAMPS and/or TENSORS
    (others are ignored); None when none was given (the level stays)."""
    if "OFF" in values and len(values) > 1:
        raise InvalidRequestError(
            "Expect only one trace level 'OFF' is specified", param="trace_level"
        )
    if list(values) == ["OFF"]:
        return frozenset()
    chosen = frozenset(value for value in values if value in (TIMESTAMPS, TENSORS))
    return chosen or None


def number(name: str, text: str, low: int, high: int, space: str = "") -> int:
    """A setting's string as Triton parses it (`std::stoi`), within [low, high]; `space`:
    what follows 'got:' in the protocol's message (gRPC has a space, HTTP none)."""
    match = LEADING_INTEGER.match(text)
    if match is None:
        raise InvalidRequestError(f"Unable to parse '{name}', got: {text}", param=name)
    value = int(match.group(1))
    if name == "trace_count" and -INT32_MAX - 1 <= value < low:
        raise InvalidRequestError(
            f"Unable to parse '{name}'. Expecting value >= {low}, got:{space}{text}", param=name
        )
    if not low <= value <= high:
        raise InvalidRequestError(
            f"Unable to parse '{name}', value is out of range [ {low}, {high} ], got: {text}",
            param=name,
        )
    return value


def bounds(name: str) -> tuple[int, int]:
    return (-1, INT32_MAX) if name == "trace_count" else (0, UINT32_MAX)


def requested(request: Mapping[str, Asked]) -> Iterator[tuple[str, str, Asked]]:
    """Each setting a request names: its name, the field it sets and the value asked
    (`NotSupportedError` first where it names `trace_file`)."""
    if "trace_file" in request:
        raise NotSupportedError(FILE_REFUSAL, param="trace_file")
    for name, field in SETTING_NAMES.items():
        if name in request:
            yield name, field, request[name]


def http_change(body: dict[str, Any]) -> dict[str, object]:
    """A JSON body's change: each setting a string (a list of strings for `trace_level`), or
    null to follow the fallback again."""
    change: dict[str, object] = {}
    for name, field, value in requested(body):
        if value is None:
            change[field] = None
        elif name == "trace_level":
            if not isinstance(value, list):
                raise InvalidRequestError("attempt to access JSON non-array as array", param=name)
            if not all(isinstance(item, str) for item in value):
                raise InvalidRequestError("attempt to access JSON non-string as string", param=name)
            chosen = levels(value)
            if chosen is not None:
                change[field] = chosen
        elif not isinstance(value, str):
            raise InvalidRequestError("attempt to access JSON non-string as string", param=name)
        else:
            change[field] = number(name, value, *bounds(name))
    return change


def grpc_change(settings: dict[str, Sequence[str]]) -> dict[str, object]:
    """A gRPC request's change: each setting's values (none: follow the fallback again)."""
    change: dict[str, object] = {}
    for name, field, asked in requested(settings):
        values = list(asked)
        if not values:
            change[field] = None
        elif name == "trace_level":
            chosen = levels(values)
            if chosen is not None:
                change[field] = chosen
        elif len(values) > 1:
            raise InvalidRequestError(f"expect only 1 value for '{name}'", param=name)
        else:
            change[field] = number(name, values[0], *bounds(name), space=" ")
    return change


def http_answer(settings: TraceSettings, model: str) -> dict[str, Any]:
    """The setting as HTTP answers it: `trace_level` a list, the others strings."""
    return {
        key: values if key == "trace_level" else values[-1]
        for key, values in settings.get(model).report()
    }


def grpc_answer(settings: TraceSettings, model: str) -> dict[str, list[str]]:
    """The setting as gRPC answers it: every setting a list (a repeated one, such as
    `resource`, with all its values)."""
    answer: dict[str, list[str]] = {}
    for key, values in settings.get(model).report():
        answer.setdefault(key, []).extend(values)
    return answer
