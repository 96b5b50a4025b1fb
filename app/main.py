"""The application factory: settings, model registry, lifespan, routers, metrics, error mapping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_fastapi_instrumentator import Instrumentator

import app as package
from app.access_log import AccessLogMiddleware
from app.engine.registry import EngineFactory, ModelRegistry
from app.engine.repository import ModelSpec
from app.engine.types import InferenceEngine
from app.errors import install_error_handlers
from app.routes import generate, health, metrics, models, repository
from app.schemas.generate import GenerateRequest
from app.settings import Settings

REPORT_CUSTOM_METRICS = "REPORT_CUSTOM_METRICS"


def vllm_engine_factory(settings: Settings, registry: CollectorRegistry) -> EngineFactory:
    """Engines backed by vLLM (imported here so tests with a double never load it)."""
    from app.engine.metrics import MetricsProvider
    from app.engine.vllm_engine import VllmEngine

    provider = MetricsProvider(registry)

    def create(spec: ModelSpec) -> InferenceEngine:
        report = settings.report_custom_metrics or spec.flag(REPORT_CUSTOM_METRICS)
        return VllmEngine(
            spec,
            cpu_kvcache_space_gib=settings.cpu_kvcache_space_gib,
            metrics=provider if report else None,
        )

    return create


def create_app(
    settings: Settings | None = None, engine_factory: EngineFactory | None = None
) -> FastAPI:
    """Build the app; engines start in its lifespan, before it accepts traffic."""
    settings = settings or Settings()
    metrics_registry = CollectorRegistry()
    registry = ModelRegistry(
        settings.model_repository,
        engine_factory or vllm_engine_factory(settings, metrics_registry),
        only=settings.models,
        drain_timeout=settings.drain_timeout_seconds,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        metrics_server = None
        if settings.metrics_port:
            metrics_server, _thread = start_http_server(
                settings.metrics_port, addr=settings.host, registry=metrics_registry
            )
        await registry.start()
        try:
            yield
        finally:
            await registry.shutdown()
            if metrics_server is not None:
                metrics_server.shutdown()

    app = FastAPI(
        title="Triton-style generate server for vLLM",
        version=package.__version__,
        description="Triton's generate extension and KServe v2 routes, served by vLLM.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.registry = registry
    app.state.metrics_registry = metrics_registry
    install_error_handlers(app)
    for router in (generate.router, health.router, models.router, repository.router, metrics.router):
        app.include_router(router)
    Instrumentator(
        should_group_status_codes=False,
        excluded_handlers=["/metrics"],
        registry=metrics_registry,
    ).instrument(app)
    app.add_middleware(AccessLogMiddleware, log_prompts=settings.log_prompts)
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
