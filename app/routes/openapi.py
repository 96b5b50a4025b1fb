"""The OpenAPI document: its tags, the bodies routes read by hand published as schemas, the
OpenAI routes' models, and no 422 responses (every invalid request is a 400 `{"error": ...}`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

OPENAPI_TAGS = [
    {"name": "generate", "description": "Triton's generate extension, served by vLLM."},
    {"name": "health", "description": "KServe v2 liveness and readiness."},
    {
        "name": "models",
        "description": "KServe v2 metadata and Triton's model repository extension.",
    },
    {"name": "metrics", "description": "Prometheus metrics."},
    {
        "name": "logging",
        "description": "Triton's logging extension: log settings, changed at once.",
    },
    {
        "name": "trace",
        "description": "Triton's trace extension: trace settings, OpenTelemetry export.",
    },
    {
        "name": "openai",
        "description": "OpenAI-compatible API (vLLM's own serving code) on the same models.",
    },
]
Components = dict[str, Any]


def customise_openapi(
    app: FastAPI,
    models: tuple[type[BaseModel], ...],
    more_components: Callable[[Components], Components],
) -> None:
    """Publish `models`, which routes read by hand (not as FastAPI body params), and
    `more_components` (given those known so far: the OpenAI routes' vLLM models, built
    when the document is first asked for), and drop FastAPI's 422 responses."""
    build_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build_openapi()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in models:
            model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(model_schema.pop("$defs", {}))
            components[model.__name__] = model_schema
        components.update(more_components(components))
        for operations in schema["paths"].values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
