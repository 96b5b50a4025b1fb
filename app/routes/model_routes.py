"""KServe's pairs of model routes: each at a model's path and at one of its versions'."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter

MODEL_PATH = "/v2/models/{model_name}"
VERSION_PATH = MODEL_PATH + "/versions/{model_version}"

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def model_routes(
    router: APIRouter, method: str, action: str, summaries: tuple[str, str], **options: Any
) -> Callable[[Endpoint], Endpoint]:
    """Add the endpoint it decorates at `MODEL_PATH + action` and `VERSION_PATH + action`
    (`summaries`: the model's, then the version's), each with FastAPI's route `options`."""
    model_summary, version_summary = summaries

    def add(endpoint: Endpoint) -> Endpoint:
        for path, summary in ((VERSION_PATH, version_summary), (MODEL_PATH, model_summary)):
            router.add_api_route(
                path + action, endpoint, methods=[method], summary=summary, **options
            )
        return endpoint

    return add
