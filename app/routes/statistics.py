"""Triton's statistics extension over HTTP: `GET /v2/models[/{model}[/versions/{v}]]/stats`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.http.dependencies import RuntimeDep
from app.routes.model_routes import model_routes
from app.routes.openapi_examples import error_response
from app.security.restrictions import ApiGroup, api_group
from app.triton.statistics import statistics_json

router = APIRouter(tags=["models"])

NOT_AVAILABLE: dict[int | str, dict[str, Any]] = {
    400: error_response("Model or version not ready", "requested model 'other' is not available")
}
STATISTICS_RESPONSE = {
    "description": "Triton's statistics JSON: counts and total nanoseconds per phase",
    "content": {
        "application/json": {
            "example": {
                "model_stats": [
                    {
                        "name": "smollm2",
                        "version": "1",
                        "last_inference": 1767225600000,
                        "inference_count": 3,
                        "execution_count": 3,
                        "inference_stats": {
                            "success": {"count": 3, "ns": 912000000},
                            "fail": {"count": 0, "ns": 0},
                            "queue": {"count": 3, "ns": 90000},
                            "compute_input": {"count": 3, "ns": 120000000},
                            "compute_infer": {"count": 3, "ns": 780000000},
                            "compute_output": {"count": 3, "ns": 3000000},
                            "cache_hit": {"count": 0, "ns": 0},
                            "cache_miss": {"count": 0, "ns": 0},
                        },
                        "response_stats": {},
                        "batch_stats": [
                            {
                                "batch_size": 1,
                                "compute_input": {"count": 3, "ns": 120000000},
                                "compute_infer": {"count": 3, "ns": 780000000},
                                "compute_output": {"count": 3, "ns": 3000000},
                            }
                        ],
                        "memory_usage": [],
                    }
                ]
            }
        }
    },
}


@router.get(
    "/v2/models/stats",
    summary="Statistics of every ready model",
    responses={200: STATISTICS_RESPONSE},
)
@api_group(ApiGroup.STATISTICS)
async def all_statistics(runtime: RuntimeDep) -> dict[str, Any]:
    return statistics_json(runtime.registry, runtime.statistics)


@model_routes(
    router,
    "GET",
    "/stats",
    ("Statistics of a model's ready versions", "Statistics of one model version"),
    responses={200: STATISTICS_RESPONSE, **NOT_AVAILABLE},
)
@api_group(ApiGroup.STATISTICS)
async def model_statistics(
    model_name: str, runtime: RuntimeDep, model_version: str = ""
) -> dict[str, Any]:
    return statistics_json(runtime.registry, runtime.statistics, model_name, model_version)
