"""Prometheus exposition of the server's registry (vllm: engine metrics and HTTP metrics)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.routes.dependencies import RuntimeDep
from app.routes.openapi_examples import METRICS_RESPONSE

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics", summary="Prometheus metrics", response_class=Response, responses={200: METRICS_RESPONSE}
)
async def metrics(runtime: RuntimeDep) -> Response:
    """This process's series; with several frontend processes, all of theirs merged."""
    if runtime.group is not None:
        return Response(await runtime.group.metrics(), media_type=CONTENT_TYPE_LATEST)
    return Response(generate_latest(runtime.metrics_registry), media_type=CONTENT_TYPE_LATEST)
