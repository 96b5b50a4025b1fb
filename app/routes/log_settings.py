"""Triton's logging extension over HTTP: `GET /v2/logging` reads the log settings, `POST
/v2/logging` changes some of them (at once) and answers them all."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.errors import InvalidRequestError
from app.http.dependencies import RuntimeDep
from app.routes.bodies import settings_object
from app.routes.openapi_examples import error_response
from app.security.restrictions import ApiGroup, api_group
from app.triton.logging_settings import (
    LOG_FILE_REFUSAL,
    LogSettingsChange,
    apply_change,
    check_log_format,
    current_settings,
    refuse_log_file,
)

router = APIRouter(tags=["logging"])

NOT_BOOLEAN = "attempt to access JSON non-boolean as boolean"
NOT_UNSIGNED = "attempt to access JSON non-unsigned-integer as unsigned-integer"
NOT_STRING = "attempt to access JSON non-string as string"
"""TritonJson's texts for a setting of the wrong JSON type."""
SETTINGS_EXAMPLE = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}
SETTINGS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Every log setting",
        "content": {"application/json": {"example": SETTINGS_EXAMPLE}},
    }
}
CHANGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **SETTINGS_RESPONSE,
    400: error_response("A setting of the wrong type or value", NOT_UNSIGNED),
    501: error_response("log_file cannot be set", LOG_FILE_REFUSAL),
}
CHANGE_BODY = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "log_info": {"type": "boolean"},
                        "log_warning": {"type": "boolean"},
                        "log_error": {"type": "boolean"},
                        "log_verbose_level": {"type": "integer", "minimum": 0},
                        "log_format": {"type": "string", "enum": ["default", "ISO8601"]},
                    },
                },
                "example": {"log_verbose_level": 1},
            }
        }
    }
}


@router.get("/v2/logging", summary="The log settings", responses=SETTINGS_RESPONSE)
@api_group(ApiGroup.LOGGING)
async def log_settings() -> dict[str, Any]:
    return current_settings()


@router.post(
    "/v2/logging",
    summary="Change log settings at once (those given; null or absent: unchanged)",
    responses=CHANGE_RESPONSES,
    openapi_extra=CHANGE_BODY,
)
@api_group(ApiGroup.LOGGING, changes_state=True)
async def change_log_settings(request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    """Applied in this process, then in every other frontend process of the group."""
    settings = apply_change(parse_change(await request.body()))
    if runtime.group is not None:
        await runtime.group.share_log_settings()
    return settings


def parse_change(body: bytes) -> LogSettingsChange:
    """A JSON object of settings (an empty body changes nothing), checked as Triton checks it;
    unknown names are ignored, as Triton does."""
    data = settings_object(body, "log")
    if data.get("log_file") is not None:
        refuse_log_file()
    log_format = typed(data, "log_format", str, NOT_STRING)
    return LogSettingsChange(
        info=typed(data, "log_info", bool, NOT_BOOLEAN),
        warning=typed(data, "log_warning", bool, NOT_BOOLEAN),
        error=typed(data, "log_error", bool, NOT_BOOLEAN),
        verbose=verbose_level(data.get("log_verbose_level")),
        format=None if log_format is None else check_log_format(log_format, "--log_format"),
    )


def typed(data: dict[str, Any], name: str, kind: type, message: str) -> Any:
    value = data.get(name)
    if value is not None and not isinstance(value, kind):
        raise InvalidRequestError(f"{name}: {message}", param=name)
    return value


def verbose_level(value: Any) -> int | None:
    """A JSON unsigned integer (not a boolean, not a float) that fits Triton's int32 level."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise InvalidRequestError(f"log_verbose_level: {NOT_UNSIGNED}", param="log_verbose_level")
    return value
