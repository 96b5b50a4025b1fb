"""The application factory: settings, model registry, lifespan, routers, error mapping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

import app as package
from app.engine.registry import EngineFactory, ModelRegistry
from app.engine.repository import ModelSpec
from app.engine.types import InferenceEngine
from app.errors import install_error_handlers
from app.routes import generate, health, models, repository
from app.schemas.generate import GenerateRequest
from app.settings import Settings


def vllm_engine_factory(settings: Settings) -> EngineFactory:
    """Engines backed by vLLM (imported here so tests with a double never load it)."""
    from app.engine.vllm_engine import VllmEngine

    def create(spec: ModelSpec) -> InferenceEngine:
        return VllmEngine(spec, cpu_kvcache_space_gib=settings.cpu_kvcache_space_gib)

    return create


def create_app(
    settings: Settings | None = None, engine_factory: EngineFactory | None = None
) -> FastAPI:
    """Build the app; engines start in its lifespan, before it accepts traffic."""
    settings = settings or Settings()
    registry = ModelRegistry(
        settings.model_repository,
        engine_factory or vllm_engine_factory(settings),
        only=settings.models,
        drain_timeout=settings.drain_timeout_seconds,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await registry.start()
        try:
            yield
        finally:
            await registry.shutdown()

    app = FastAPI(
        title="Triton-style generate server for vLLM",
        version=package.__version__,
        description="Triton's generate extension and KServe v2 routes, served by vLLM.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.registry = registry
    install_error_handlers(app)
    app.include_router(generate.router)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(repository.router)
    add_schema_components(app, GenerateRequest)
    return app


def add_schema_components(app: FastAPI, *models: type[Any]) -> None:
    """Publish models that routes read by hand (not as FastAPI body params) in OpenAPI."""
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
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
