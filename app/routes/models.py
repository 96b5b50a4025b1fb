"""KServe v2 server and model metadata, model readiness and configuration."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from app.http.dependencies import RegistryDep
from app.routes.model_routes import model_routes
from app.routes.openapi_examples import MODEL_CONFIG_RESPONSE, NOT_FOUND, READY_RESPONSES
from app.schemas.kserve import ModelMetadata, ServerMetadata
from app.security.restrictions import ApiGroup, api_group
from app.triton.model_config import config_json, metadata_json
from app.triton.server_metadata import server_metadata as triton_server_metadata

router = APIRouter(tags=["models"])


@router.get("/v2", summary="Server metadata", response_model=ServerMetadata)
@api_group(ApiGroup.METADATA)
async def server_metadata() -> dict[str, Any]:
    return triton_server_metadata()


@model_routes(
    router,
    "GET",
    "",
    ("Model metadata", "Model metadata of one version"),
    response_model=ModelMetadata,
    responses=NOT_FOUND,
)
@api_group(ApiGroup.METADATA)
async def model_metadata(
    model_name: str, registry: RegistryDep, model_version: str | None = None
) -> dict[str, Any]:
    served = registry.get(model_name, model_version)
    versions = [v.version for v in registry.versions(model_name)]
    return metadata_json(model_name, [served.version] if model_version else versions, served.spec)


@model_routes(
    router,
    "GET",
    "/ready",
    ("Is the model ready", "Is this model version ready"),
    responses={**READY_RESPONSES, **NOT_FOUND},
    response_class=Response,
)
@api_group(ApiGroup.HEALTH)
async def model_ready(
    model_name: str, registry: RegistryDep, model_version: str | None = None
) -> Response:
    served = registry.get(model_name, model_version)
    return Response(status_code=200 if served.is_ready else 503)


@model_routes(
    router,
    "GET",
    "/config",
    ("Model configuration", "Model configuration of one version"),
    responses={200: MODEL_CONFIG_RESPONSE, **NOT_FOUND},
)
@api_group(ApiGroup.MODEL_CONFIG)
async def model_config(
    model_name: str, registry: RegistryDep, model_version: str | None = None
) -> dict[str, Any]:
    return config_json(registry.get(model_name, model_version).spec)
