"""Triton's model repository extension: index, load, unload."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from app.errors import InvalidRequestError
from app.repository.overrides import FILE_PREFIX, parse_override
from app.routes.dependencies import RegistryDep, RuntimeDep, optional_json_body
from app.routes.openapi_examples import INDEX_REQUEST_BODY, error_response
from app.schemas.kserve import ModelControlRequest, RepositoryIndexEntry, RepositoryIndexRequest
from app.triton.repository import load_model as triton_load_model

router = APIRouter(tags=["models"])

IndexBody = Annotated[RepositoryIndexRequest | None, Depends(optional_json_body(RepositoryIndexRequest))]
ControlBody = Annotated[ModelControlRequest | None, Depends(optional_json_body(ModelControlRequest))]

LOAD_ERRORS = {
    400: error_response("The model could not be loaded", "load failed for model 'smollm2': ...")
}
UNLOAD_ERRORS = {404: error_response("Model not loaded", "Request for unknown model: 'other' is not found")}


@router.post(
    "/v2/repository/index",
    summary="Every model of the repository with its state",
    response_model=list[RepositoryIndexEntry],
    response_model_exclude_none=True,
    openapi_extra=INDEX_REQUEST_BODY,
)
async def repository_index(
    registry: RegistryDep,
    body: IndexBody,
) -> list[RepositoryIndexEntry]:
    entries = [
        RepositoryIndexEntry(
            name=e.name, version=e.version, state=e.state, reason=e.reason or None
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
async def load_model(
    model_name: str,
    runtime: RuntimeDep,
    body: ControlBody,
) -> Response:
    """Triton's overrides are taken: `parameters.config` (the model configuration as JSON)
    and `parameters["file:<version>/<name>"]` (base64 file contents, with `config`)."""
    override = parse_override(decoded_files(body.parameters or {})) if body is not None else None
    await triton_load_model(runtime.registry, runtime.statistics, model_name, override)
    return Response(status_code=200)


def decoded_files(parameters: dict[str, Any]) -> dict[str, Any]:
    """Load parameters with the base64 content of each `file:` parameter decoded."""
    decoded = dict(parameters)
    for key, value in parameters.items():
        if key.startswith(FILE_PREFIX):
            try:
                decoded[key] = base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise InvalidRequestError(f"parameters.{key}: not base64-encoded file content ({exc})") from exc
    return decoded


@router.post(
    "/v2/repository/models/{model_name}/unload",
    summary="Unload a model: stop admitting, let running requests finish, stop its engines",
    responses=UNLOAD_ERRORS,
    response_class=Response,
)
async def unload_model(
    model_name: str,
    registry: RegistryDep,
    body: ControlBody,
) -> Response:
    await registry.unload(model_name)
    return Response(status_code=200)
