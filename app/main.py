"""The composition root: settings, the runtime (registry, generation service, metrics), the
HTTP app with its routers and middleware. The only module that knows every package."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CollectorRegistry
from prometheus_fastapi_instrumentator import Instrumentator

import app as package
from app.core.service import GenerationService
from app.grpc.server import GrpcServer
from app.http.access import CrossSiteGuard, HostNames, RestrictedApiMiddleware
from app.http.access_log import AccessLogMiddleware
from app.http.connections import ConnectionLimits
from app.http.errors import ErrorBodies, install_error_handlers
from app.http.middleware import (
    ApiKeyMiddleware,
    BodyDeadlineMiddleware,
    BodySizeLimitMiddleware,
    FrontendProcessHeader,
)
from app.http.trace_context import TraceContextMiddleware
from app.http.transport import HttpTransport
from app.multiprocess.link import FrontendProcessLink, SharedModelRegistry
from app.observability.exposition import exposition
from app.observability.load_metrics import ModelLoadCollector
from app.observability.log_control import LogSettings, configure_logging
from app.observability.setup import ObservabilityOptions, build_observability
from app.openai import routes as openai_routes
from app.openai import utility as openai_utility
from app.openai.errors import openai_error_body
from app.options import (
    grammar_worker_options,
    grpc_options,
    lifecycle_options,
    request_limits,
    startup_models,
)
from app.repository.gc_freeze import freeze_heap, release_heap
from app.repository.layout import EngineArgsCheck, ModelSpec, accept_engine_args
from app.repository.poll import RepositoryPoller
from app.repository.registry import EngineFactory, ModelRegistry
from app.routes import (
    generate,
    health,
    log_settings,
    metrics,
    models,
    playground,
    repository,
    statistics,
    trace,
)
from app.routes.docs import install_docs_and_static
from app.routes.query import API_KEY_PARAMETER, EVENT_SOURCE_PATH
from app.runtime import Runtime
from app.schemas.generate import GenerateRequest
from app.schemas.kserve import RepositoryIndexRequest
from app.settings import Settings
from app.triton.model_table import model_table

logger = logging.getLogger(__name__)

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
OPEN_PREFIXES = ["/docs", "/redoc", "/openapi.json", "/static/"]
"""Routes that answer without an API key: the docs, the playground's page and assets."""


def vllm_engines(
    settings: Settings,
    metrics_registry: CollectorRegistry,
    link: FrontendProcessLink | None = None,
) -> tuple[EngineFactory, EngineArgsCheck, Callable[[ModelSpec], None]]:
    """vLLM's engines, its check of model.json and what to forget of an unloaded model
    (imported here: a test with an engine double never loads vLLM)."""
    from app.engine.engine_args import vllm_engine_args
    from app.engine.factory import VllmEngines
    from app.engine.grammars import configure_grammar_workers

    configure_grammar_workers(grammar_worker_options(settings))

    engines = VllmEngines(
        metrics_registry,
        cpu_kvcache_space_gib=settings.cpu_kvcache_space_gib,
        report_all_metrics=settings.report_custom_metrics,
        ray_address=settings.ray_address,
        cores=link,
    )
    return engines, vllm_engine_args, engines.forget


def configure_logs(settings: Settings, log_file: str = "") -> None:
    """This process's logging: LOG_LEVEL and Triton's --log-verbose, --log-info, --log-warning,
    --log-error and --log-format (changed later by the logging extension), to `log_file` (Triton's
    --log-file) if given."""
    switches = (settings.log_verbose, settings.log_info, settings.log_warning, settings.log_error)
    configure_logging(LogSettings.of(settings.log_level, settings.log_format, *switches), log_file)


def build_runtime(
    settings: Settings,
    engine_factory: EngineFactory | None = None,
    link: FrontendProcessLink | None = None,
) -> Runtime:
    """The registry of the repository's models, the generation service, the metrics; in a
    frontend process of several (`link`), on clients of the supervisor's engine cores."""
    metrics_registry = CollectorRegistry()
    check_engine_args: EngineArgsCheck = accept_engine_args
    on_unloaded = None
    if engine_factory is None:
        engine_factory, check_engine_args, on_unloaded = vllm_engines(
            settings, metrics_registry, link
        )
    shared: dict[str, Any] = {"link": link} if link is not None else {}
    registry = (SharedModelRegistry if link is not None else ModelRegistry)(
        settings.model_repository,
        engine_factory,
        only=startup_models(settings),
        options=lifecycle_options(settings),
        check_engine_args=check_engine_args,
        on_unloaded=on_unloaded,
        **shared,
    )
    metrics_registry.register(ModelLoadCollector(registry))
    options = ObservabilityOptions(**settings.model_dump(include=ObservabilityOptions.names()))
    observed = build_observability(registry, metrics_registry, options)
    generation = GenerationService(
        request_limits(settings),
        timeout_seconds=settings.request_timeout_seconds,
        statistics=observed.recorder,
    )
    if link is not None:
        link.local_metrics = lambda: exposition(metrics_registry)
        link.trace_settings = observed.tracer.settings
    return Runtime(
        registry=registry,
        generation=generation,
        metrics_registry=metrics_registry,
        statistics=observed.statistics,
        group=link,
        observability=observed,
    )


def create_grpc_server(settings: Settings, runtime: Runtime) -> GrpcServer | None:
    """Triton's gRPC frontend on the HTTP app's runtime (None when GRPC_PORT is 0)."""
    if not settings.grpc_port or not settings.allow_grpc:
        return None
    return GrpcServer(runtime, grpc_options(settings))


async def start_runtime(
    runtime: Runtime, link: FrontendProcessLink | None = None, freeze: bool = True
) -> None:
    """Start the engines (as one of several frontend processes: on the group's shared
    cores), then freeze the heap: full collections while serving skip the start-up heap."""
    if link is not None:
        await link.connect()
    await runtime.registry.start()
    if link is not None:
        await link.ready()
    if freeze:
        freeze_heap()


def repository_poller(
    settings: Settings, runtime: Runtime, link: FrontendProcessLink | None
) -> RepositoryPoller | None:
    """Triton's poll mode: one process polls (the first of several, whose loads and unloads
    every other process follows)."""
    if settings.model_control_mode != "poll" or (link is not None and link.index != 0):
        return None
    return RepositoryPoller(
        runtime.registry, settings.repository_poll_secs, settings.models or None
    )


def server_lifespan(
    settings: Settings, runtime: Runtime, link: FrontendProcessLink | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start-up and shutdown around serving: the metrics port, the engines, the repository
    poll; then everything stopped in reverse."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if runtime.observability is not None:  # the metrics port here, unless the supervisor's
            port = settings.metrics_port if link is None and settings.allow_metrics else 0
            runtime.observability.start(settings.metrics_address or settings.host, port)
        await start_runtime(runtime, link, settings.freeze_gc_heap)
        if link is None or link.index == 0:
            logger.info(model_table(runtime.registry.index()))
        poller = repository_poller(settings, runtime, link)
        if poller is not None:
            await poller.start()
        try:
            yield
        finally:
            if poller is not None:
                await poller.stop()
            await runtime.registry.shutdown()
            if link is not None:
                await link.close()
            if runtime.observability is not None:
                runtime.observability.stop()
            release_heap()

    return lifespan


def http_transport(settings: Settings) -> HttpTransport:
    """How the HTTP port takes connections: TLS, and each connection's limits."""
    limits = ConnectionLimits(
        settings.http_header_timeout_seconds,
        settings.max_request_header_bytes,
        settings.http_body_timeout_seconds,
        settings.max_http_connections,
    )
    return HttpTransport(
        settings.http_ssl_certfile,
        settings.http_ssl_keyfile,
        settings.http_ssl_ca_certs,
        limits,
        settings.http_keep_alive_seconds,
    )


def create_app(
    settings: Settings | None = None,
    engine_factory: EngineFactory | None = None,
    link: FrontendProcessLink | None = None,
) -> FastAPI:
    """Build the app; engines start in its lifespan, before it accepts traffic. `link`: this
    is one of several frontend processes sharing the supervisor's engine cores."""
    settings = settings or Settings()
    runtime = build_runtime(settings, engine_factory, link)
    app = FastAPI(
        title="Triton-style generate server for vLLM",
        version=package.__version__,
        description="Triton's generate extension and KServe v2 routes, served by vLLM. "
        "The playground is at `/`.",
        openapi_tags=OPENAPI_TAGS,
        lifespan=server_lifespan(settings, runtime, link),
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.runtime = runtime
    app.state.http_transport = http_transport(settings)
    errors = ErrorBodies()
    errors.add(openai_routes.PREFIX + "/", openai_error_body)
    install_error_handlers(app, errors)
    routers = (
        generate.router,
        health.router,
        statistics.router,
        models.router,
        repository.router,
        *([metrics.router] if settings.allow_metrics else []),
        log_settings.router,
        trace.router,
    )
    for router in routers:  # statistics before models: /v2/models/stats is not a model's metadata
        app.include_router(router)
    app.include_router(openai_routes.router)
    lora = settings.vllm_allow_runtime_lora_updating
    openai_utility.install(app, errors, runtime_lora=lora, one_process=link is None)
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
    customise_openapi(app, GenerateRequest, RepositoryIndexRequest)
    return app


def add_middleware(app: FastAPI, settings: Settings, errors: ErrorBodies) -> None:
    """Outermost first: access log, CORS, the cross-site guard, body deadline and size limit,
    API keys, restricted API groups (the last one added runs first)."""
    restrictions = settings.http_restrictions()
    if restrictions.by_group:
        app.add_middleware(
            RestrictedApiMiddleware, restrictions=restrictions, routes=app.routes, errors=errors
        )
    if settings.api_keys:
        open_prefixes = list(OPEN_PREFIXES)
        open_paths = ["/"]
        if settings.auth_open_health:
            open_prefixes.append("/v2/health/")
            open_paths += ["/health", "/ping"]
        if settings.auth_open_metrics:
            open_prefixes.append("/metrics")
        app.add_middleware(
            ApiKeyMiddleware,
            keys=settings.api_keys,
            open_prefixes=open_prefixes,
            open_paths=open_paths,
            query_key_path=EVENT_SOURCE_PATH,
            query_key_name=API_KEY_PARAMETER,
            errors=errors,
        )
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=settings.max_request_body_bytes,
        max_bytes_in_flight=settings.max_request_bytes_in_flight,
        errors=errors,
    )
    app.add_middleware(
        BodyDeadlineMiddleware, timeout=settings.http_body_timeout_seconds, errors=errors
    )
    app.add_middleware(
        CrossSiteGuard,
        allowed_origins=settings.cors_allow_origins,
        routes=app.routes,
        hosts=HostNames(settings.allowed_hosts),
        errors=errors,
    )
    if settings.cors_allow_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_allow_origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID"],
        )
    app.add_middleware(TraceContextMiddleware)
    app.add_middleware(AccessLogMiddleware, log_prompts=settings.log_prompts)


def customise_openapi(app: FastAPI, *models: type[Any]) -> None:
    """Publish models that routes read by hand (not as FastAPI body params) in OpenAPI, with
    vLLM's own models of the OpenAI routes, and drop FastAPI's 422 responses: every invalid
    request is answered 400 `{"error": ...}`."""
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
        from app.engine.openai_schemas import openai_components  # vLLM's models: when asked for

        components.update(openai_components(components))
        for operations in schema["paths"].values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
