"""Prometheus exposition of the server's registry: Triton's nv_ metrics, the vllm: engine
metrics, HTTP and gRPC metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.http.dependencies import RuntimeDep
from app.observability.exposition import exposition
from app.routes.openapi_examples import METRICS_RESPONSE
from app.security.restrictions import api_group

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: METRICS_RESPONSE},
)
@api_group(None)
async def metrics(runtime: RuntimeDep) -> Response:
    """This process's series; with several frontend processes, all of theirs merged."""
    if runtime.group is not None:
        return Response(await runtime.group.metrics(), media_type=CONTENT_TYPE_LATEST)
    return Response(exposition(runtime.metrics_registry), media_type=CONTENT_TYPE_LATEST)
