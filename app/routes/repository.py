"""Triton's model repository extension: index, load, unload."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.errors import InvalidRequestError
from app.http.dependencies import RegistryDep, RuntimeDep
from app.repository.overrides import (
    FILE_PREFIX,
    check_load_body_size,
    check_override_files,
    parse_override,
)
from app.routes.bodies import optional_json_body, parse_json_body
from app.routes.openapi_examples import INDEX_REQUEST_BODY, error_response
from app.schemas.kserve import ModelControlRequest, RepositoryIndexEntry, RepositoryIndexRequest
from app.security.restrictions import ApiGroup, api_group
from app.triton.repository import check_control_requests
from app.triton.repository import load_model as triton_load_model
from app.triton.repository import unload_model as triton_unload_model

router = APIRouter(tags=["models"])


async def load_request_body(request: Request, registry: RegistryDep) -> ModelControlRequest | None:
    """A load's body, read only in explicit mode (503 otherwise, as Triton) and only parsed
    when its size in JSON values fits the allowed number of override files."""
    check_control_requests(registry)
    check_load_body_size(await request.body(), registry.override_limits.max_files)
    return await parse_json_body(request, ModelControlRequest)


LoadBody = Annotated[ModelControlRequest | None, Depends(load_request_body)]
IndexBody = Annotated[
    RepositoryIndexRequest | None, Depends(optional_json_body(RepositoryIndexRequest))
]
ControlBody = Annotated[
    ModelControlRequest | None, Depends(optional_json_body(ModelControlRequest))
]

LOAD_ERRORS: dict[int | str, dict[str, Any]] = {
    400: error_response("The model could not be loaded", "load failed for model 'smollm2': ...")
}
UNLOAD_ERRORS: dict[int | str, dict[str, Any]] = {
    404: error_response("Model not loaded", "Request for unknown model: 'other' is not found")
}


@router.post(
    "/v2/repository/index",
    summary="Every model of the repository with its state",
    response_model=list[RepositoryIndexEntry],
    response_model_exclude_none=True,
    openapi_extra=INDEX_REQUEST_BODY,
)
@api_group(ApiGroup.MODEL_REPOSITORY)
async def repository_index(
    registry: RegistryDep,
    body: IndexBody,
) -> list[RepositoryIndexEntry]:
    entries = [
        RepositoryIndexEntry(
            name=e.name, version=e.version, state=e.state or None, reason=e.reason or None
        )
        for e in registry.index()
    ]
    if body is not None and body.ready:
        entries = [e for e in entries if e.state == "READY"]
    return entries


@router.post(
    "/v2/repository/models/{model_name}/load",
    summary="Load (or reload) a model: reads its config (or the override) and starts its engines",
    responses=LOAD_ERRORS,
    response_class=Response,
)
@api_group(ApiGroup.MODEL_REPOSITORY, changes_state=True)
async def load_model(
    model_name: str,
    runtime: RuntimeDep,
    body: LoadBody,
) -> Response:
    """Triton's overrides are taken: `parameters.config` (the model configuration as JSON)
    and `parameters["file:<version>/<name>"]` (base64 file contents, with `config`). In
    Triton's explicit model control mode only; 503 otherwise."""
    override = None
    if body is not None and body.parameters:
        sizes = {
            key: decoded_size(value)
            for key, value in body.parameters.items()
            if key.startswith(FILE_PREFIX)
        }
        check_override_files(sizes, runtime.registry.override_limits)
        override = parse_override(decoded_files(body.parameters))
    await triton_load_model(runtime.registry, runtime.statistics, model_name, override)
    return Response(status_code=200)


def decoded_size(value: object) -> int:
    """The size of base64 text once decoded (of valid text: invalid text is refused then)."""
    return len(str(value).rstrip("=")) * 3 // 4


def decoded_files(parameters: dict[str, Any]) -> dict[str, Any]:
    """Load parameters with the base64 content of each `file:` parameter decoded."""
    decoded = dict(parameters)
    for key, value in parameters.items():
        if key.startswith(FILE_PREFIX):
            try:
                decoded[key] = base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise InvalidRequestError(
                    f"parameters.{key}: not base64-encoded file content ({exc})"
                ) from exc
    return decoded


@router.post(
    "/v2/repository/models/{model_name}/unload",
    summary="Unload a model: stop admitting, let running requests finish, stop its engines",
    responses=UNLOAD_ERRORS,
    response_class=Response,
)
@api_group(ApiGroup.MODEL_REPOSITORY, changes_state=True)
async def unload_model(
    model_name: str,
    registry: RegistryDep,
    body: ControlBody,
) -> Response:
    await triton_unload_model(registry, model_name)
    return Response(status_code=200)
