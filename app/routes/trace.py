"""Triton's trace extension over HTTP: `GET` reads the global (or a model's) trace setting,
`POST` changes some of it and answers all of it (`/v2/trace/setting`,
`/v2/models/<model>/trace/setting`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.http.dependencies import RuntimeDep
from app.routes.bodies import settings_object
from app.routes.openapi_examples import error_response
from app.security.restrictions import ApiGroup, api_group
from app.triton.trace_extension import (
    FILE_REFUSAL,
    check_model,
    http_answer,
    http_change,
    settings_of,
)

router = APIRouter(tags=["trace"])

SETTING_EXAMPLE = {
    "trace_level": ["TIMESTAMPS"],
    "trace_rate": "1",
    "trace_count": "-1",
    "trace_mode": "opentelemetry",
    "url": "http://collector:4318/v1/traces",
    "bsp_max_queue_size": "2048",
    "bsp_schedule_delay": "5000",
    "bsp_max_export_batch_size": "512",
}
SETTING_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The trace setting",
        "content": {"application/json": {"example": SETTING_EXAMPLE}},
    },
    400: error_response(
        "A model that is not ready, or a setting of the wrong type or value",
        "Unable to parse 'trace_rate', got: often",
    ),
}
CHANGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **SETTING_RESPONSE,
    501: error_response("trace_file cannot be set", FILE_REFUSAL),
}
CHANGE_BODY = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "trace_level": {
                            "type": ["array", "null"],
                            "items": {"enum": ["OFF", "TIMESTAMPS", "TENSORS"]},
                        },
                        "trace_rate": {"type": ["string", "null"]},
                        "trace_count": {"type": ["string", "null"]},
                        "log_frequency": {"type": ["string", "null"]},
                    },
                },
                "example": {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"},
            }
        }
    }
}


@router.get("/v2/trace/setting", summary="The global trace setting", responses=SETTING_RESPONSE)
@api_group(ApiGroup.TRACE)
async def trace_setting(runtime: RuntimeDep) -> dict[str, Any]:
    return await answer(runtime, "", None)


@router.post(
    "/v2/trace/setting",
    summary="Change the global trace setting (null: back to the start-up value)",
    responses=CHANGE_RESPONSES,
    openapi_extra=CHANGE_BODY,
)
@api_group(ApiGroup.TRACE, changes_state=True)
async def change_trace_setting(request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    return await answer(runtime, "", await request.body())


@router.get(
    "/v2/models/{model_name}/trace/setting",
    summary="A model's trace setting",
    responses=SETTING_RESPONSE,
)
@api_group(ApiGroup.TRACE)
async def model_trace_setting(model_name: str, runtime: RuntimeDep) -> dict[str, Any]:
    return await answer(runtime, model_name, None)


@router.post(
    "/v2/models/{model_name}/trace/setting",
    summary="Change a model's trace setting (null: follow the global setting again)",
    responses=CHANGE_RESPONSES,
    openapi_extra=CHANGE_BODY,
)
@api_group(ApiGroup.TRACE, changes_state=True)
async def change_model_trace_setting(
    model_name: str, request: Request, runtime: RuntimeDep
) -> dict[str, Any]:
    return await answer(runtime, model_name, await request.body())


async def answer(runtime: RuntimeDep, model: str, body: bytes | None) -> dict[str, Any]:
    """Apply the body's change (a POST; in every frontend process), then answer the setting."""
    settings = settings_of(runtime.trace_settings)
    check_model(runtime.registry, model)
    if body is not None:
        change = http_change(settings_object(body, "trace"))
        settings.update(model, change)
        if runtime.group is not None:
            await runtime.group.share_trace_setting(model, change)
    return http_answer(settings, model)
