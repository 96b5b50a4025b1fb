"""The composition root: settings, the runtime (registry, generation service, metrics), the
HTTP app with its routers and middleware. The only module that knows every package."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_fastapi_instrumentator import Instrumentator

import app as package
from app.core.limits import RequestLimits
from app.core.service import GenerationService
from app.grpc.server import GrpcOptions, GrpcServer
from app.http.access_log import AccessLogMiddleware
from app.http.errors import ErrorBodies, install_error_handlers
from app.http.middleware import ApiKeyMiddleware, BodySizeLimitMiddleware, FrontendProcessHeader
from app.multiprocess.link import SharedModelRegistry, WorkerLink
from app.observability.load_metrics import ModelLoadCollector
from app.observability.statistics import InferenceStatistics, StatisticsCollector
from app.openai import routes as openai_routes
from app.openai.errors import openai_error_body
from app.openai.schemas import DOCUMENTED_MODELS as OPENAI_MODELS
from app.repository.heap import freeze_heap, release_heap
from app.repository.layout import EngineArgsCheck, ModelSpec, accept_engine_args
from app.repository.registry import EngineFactory, LifecycleOptions, ModelRegistry
from app.repository.supervision import RestartPolicy
from app.routes import generate, health, metrics, models, playground, repository, statistics
from app.routes.docs import install_docs_and_static
from app.routes.query import API_KEY_PARAMETER, EVENT_SOURCE_PATH
from app.runtime import Runtime
from app.schemas.generate import GenerateRequest
from app.schemas.kserve import RepositoryIndexRequest
from app.settings import Settings

OPENAPI_TAGS = [
    {"name": "generate", "description": "Triton's generate extension, served by vLLM."},
    {"name": "health", "description": "KServe v2 liveness and readiness."},
    {"name": "models", "description": "KServe v2 metadata and Triton's model repository extension."},
    {"name": "metrics", "description": "Prometheus metrics."},
    {"name": "openai", "description": "OpenAI-compatible API (vLLM's own serving code) on the same models."},
]
OPEN_PREFIXES = ["/docs", "/redoc", "/openapi.json", "/static/"]
"""Routes that answer without an API key: the docs, the playground's page and assets."""


def vllm_engines(
    settings: Settings, metrics_registry: CollectorRegistry, link: WorkerLink | None = None
) -> tuple[EngineFactory, EngineArgsCheck, Callable[[ModelSpec], None]]:
    """vLLM's engines, its check of model.json and what to forget of an unloaded model
    (imported here: a test with an engine double never loads vLLM)."""
    from app.engine.engine_args import vllm_engine_args
    from app.engine.factory import VllmEngines

    engines = VllmEngines(
        metrics_registry,
        cpu_kvcache_space_gib=settings.cpu_kvcache_space_gib,
        report_all_metrics=settings.report_custom_metrics,
        ray_address=settings.ray_address,
        cores=link,
    )
    return engines, vllm_engine_args, engines.forget


def lifecycle_options(settings: Settings) -> LifecycleOptions:
    restart = RestartPolicy(
        enabled=settings.engine_restart,
        max_restarts=settings.engine_restart_max,
        window_seconds=settings.engine_restart_window_seconds,
        backoff_seconds=settings.engine_restart_backoff_seconds,
        max_backoff_seconds=settings.engine_restart_backoff_max_seconds,
        probe_interval_seconds=settings.engine_probe_interval_seconds,
        probe_timeout_seconds=settings.engine_probe_timeout_seconds,
    )
    return LifecycleOptions(
        drain_timeout=settings.drain_timeout_seconds,
        max_pending=settings.max_pending_requests,
        restart=restart,
        reload_in_place=settings.reload_in_place,
    )


def build_runtime(
    settings: Settings, engine_factory: EngineFactory | None = None, link: WorkerLink | None = None
) -> Runtime:
    """The registry of the repository's models, the generation service, the metrics; in a
    frontend process of several (`link`), on clients of the supervisor's engine cores."""
    metrics_registry = CollectorRegistry()
    check_engine_args: EngineArgsCheck = accept_engine_args
    on_unloaded = None
    if engine_factory is None:
        engine_factory, check_engine_args, on_unloaded = vllm_engines(settings, metrics_registry, link)
    shared = {"link": link} if link is not None else {}
    registry = (SharedModelRegistry if link is not None else ModelRegistry)(
        settings.model_repository,
        engine_factory,
        only=settings.models,
        options=lifecycle_options(settings),
        check_engine_args=check_engine_args,
        on_unloaded=on_unloaded,
        **shared,
    )
    metrics_registry.register(ModelLoadCollector(registry))
    inference_statistics = InferenceStatistics()
    metrics_registry.register(StatisticsCollector(inference_statistics))
    generation = GenerationService(
        RequestLimits(max_tokens=settings.max_tokens_limit, max_n=settings.max_n),
        timeout_seconds=settings.request_timeout_seconds,
        statistics=inference_statistics,
    )
    if link is not None:
        link.local_metrics = lambda: generate_latest(metrics_registry)
    return Runtime(
        registry=registry,
        generation=generation,
        metrics_registry=metrics_registry,
        statistics=inference_statistics,
        group=link,
    )


def create_grpc_server(settings: Settings, runtime: Runtime) -> GrpcServer | None:
    """Triton's gRPC frontend on the HTTP app's runtime (None when GRPC_PORT is 0)."""
    if not settings.grpc_port:
        return None
    options = GrpcOptions(
        host=settings.host,
        port=settings.grpc_port,
        api_keys=tuple(settings.api_keys),
        open_health=settings.auth_open_health,
        log_prompts=settings.log_prompts,
        max_receive_message_bytes=settings.grpc_max_receive_message_bytes or settings.max_request_body_bytes,
        max_send_message_bytes=settings.grpc_max_send_message_bytes,
        keepalive_time_ms=settings.grpc_keepalive_time_ms,
        keepalive_timeout_ms=settings.grpc_keepalive_timeout_ms,
        keepalive_permit_without_calls=settings.grpc_keepalive_permit_without_calls,
        http2_max_pings_without_data=settings.grpc_http2_max_pings_without_data,
        http2_min_recv_ping_interval_without_data_ms=settings.grpc_http2_min_recv_ping_interval_without_data_ms,
        http2_max_ping_strikes=settings.grpc_http2_max_ping_strikes,
        reuse_port=settings.grpc_reuse_port,
    )
    return GrpcServer(runtime, options)


async def start_runtime(runtime: Runtime, link: WorkerLink | None = None, freeze: bool = True) -> None:
    """Start the engines (as one of several frontend processes: on the group's shared
    cores), then freeze the heap: full collections while serving skip the start-up heap."""
    if link is not None:
        await link.connect()
    await runtime.registry.start()
    if link is not None:
        await link.ready()
    if freeze:
        freeze_heap()


def create_app(
    settings: Settings | None = None, engine_factory: EngineFactory | None = None, link: WorkerLink | None = None
) -> FastAPI:
    """Build the app; engines start in its lifespan, before it accepts traffic. `link`: this
    is one of several frontend processes sharing the supervisor's engine cores."""
    settings = settings or Settings()
    runtime = build_runtime(settings, engine_factory, link)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        metrics_server = None
        if settings.metrics_port:
            metrics_server, _thread = start_http_server(
                settings.metrics_port, addr=settings.host, registry=runtime.metrics_registry
            )
        await start_runtime(runtime, link, settings.freeze_gc_heap)
        try:
            yield
        finally:
            await runtime.registry.shutdown()
            if link is not None:
                await link.close()
            if metrics_server is not None:
                metrics_server.shutdown()
            release_heap()

    app = FastAPI(
        title="Triton-style generate server for vLLM",
        version=package.__version__,
        description="Triton's generate extension and KServe v2 routes, served by vLLM. "
        "The playground is at `/`.",
        openapi_tags=OPENAPI_TAGS,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.runtime = runtime
    errors = ErrorBodies()
    errors.add(openai_routes.PREFIX + "/", openai_error_body)
    install_error_handlers(app, errors)
    routers = (generate.router, health.router, statistics.router, models.router, repository.router, metrics.router)
    for router in routers:  # statistics before models: /v2/models/stats is not a model's metadata
        app.include_router(router)
    app.include_router(openai_routes.router)
    app.include_router(playground.router)
    install_docs_and_static(app)
    Instrumentator(
        should_group_status_codes=False,
        excluded_handlers=["/metrics"],
        registry=runtime.metrics_registry,
    ).instrument(app)
    add_middleware(app, settings, errors)
    if link is not None:
        app.add_middleware(FrontendProcessHeader, index=link.index)
    customise_openapi(app, GenerateRequest, RepositoryIndexRequest, *OPENAI_MODELS)
    return app


def add_middleware(app: FastAPI, settings: Settings, errors: ErrorBodies) -> None:
    """Outermost first: access log, CORS, body size limit, API keys (the last one added
    runs first)."""
    if settings.api_keys:
        open_prefixes = list(OPEN_PREFIXES)
        if settings.auth_open_health:
            open_prefixes.append("/v2/health/")
        if settings.auth_open_metrics:
            open_prefixes.append("/metrics")
        app.add_middleware(
            ApiKeyMiddleware,
            keys=settings.api_keys,
            open_prefixes=open_prefixes,
            open_paths=["/"],
            query_key_path=EVENT_SOURCE_PATH,
            query_key_name=API_KEY_PARAMETER,
            errors=errors,
        )
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_body_bytes, errors=errors)
    if settings.cors_allow_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_allow_origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID"],
        )
    app.add_middleware(AccessLogMiddleware, log_prompts=settings.log_prompts)


def customise_openapi(app: FastAPI, *models: type[Any]) -> None:
    """Publish models that routes read by hand (not as FastAPI body params) in OpenAPI, and
    drop FastAPI's 422 responses: every invalid request is answered 400 `{"error": ...}`."""
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
        for operations in schema["paths"].values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
