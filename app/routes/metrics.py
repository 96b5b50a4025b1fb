"""Prometheus exposition of the server's registry (vllm: engine metrics and HTTP metrics)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.routes.openapi_examples import METRICS_RESPONSE

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics", summary="Prometheus metrics", response_class=Response, responses={200: METRICS_RESPONSE}
)
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
