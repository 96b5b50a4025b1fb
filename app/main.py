"""The composition root: settings -> the runtime (registry, generation service, metrics) -> the
HTTP app (its routers, its middleware stack, its OpenAPI document) and the gRPC server. The
only module that knows every package; each part is built where it belongs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from prometheus_fastapi_instrumentator import Instrumentator

import app as package
from app.core.service import GenerationService
from app.grpc.server import GrpcServer
from app.http.errors import ErrorBodies, install_error_handlers
from app.http.stack import QueryKey, add_middleware
from app.http.transport import http_transport
from app.multiprocess.link import FrontendProcessLink, SharedModelRegistry
from app.observability.exposition import exposition
from app.observability.load_metrics import ModelLoadCollector
from app.observability.log_control import configure_logging
from app.observability.setup import ObservabilityOptions, build_observability
from app.openai import routes as openai_routes
from app.openai import utility as openai_utility
from app.openai.errors import openai_error_body
from app.options import (
    engine_options,
    grpc_options,
    lifecycle_options,
    log_settings,
    request_limits,
    serving_options,
    startup_models,
)
from app.repository.layout import EngineArgsCheck, ModelSpec, accept_engine_args
from app.repository.registry import EngineFactory, ModelRegistry
from app.routes import (
    generate,
    health,
    metrics,
    models,
    playground,
    repository,
    statistics,
    trace,
)
from app.routes import (
    log_settings as log_settings_routes,
)
from app.routes.docs import install_docs_and_static
from app.routes.openapi import OPENAPI_TAGS, Components, customise_openapi
from app.routes.query import API_KEY_PARAMETER, EVENT_SOURCE_PATH
from app.runtime import Runtime
from app.schemas.generate import GenerateRequest
from app.schemas.kserve import RepositoryIndexRequest
from app.settings import Settings


def vllm_engines(
    settings: Settings,
    metrics_registry: CollectorRegistry,
    link: FrontendProcessLink | None = None,
) -> tuple[EngineFactory, EngineArgsCheck, Callable[[ModelSpec], None]]:
    """vLLM's engines, its check of model.json and what to forget of an unloaded model
    (imported here: a test with an engine double never loads vLLM)."""
    from app.engine.factory import vllm_engines as engines

    return engines(metrics_registry, engine_options(settings), link)


def configure_logs(settings: Settings, log_file: str = "") -> None:
    """This process's logging, as the settings say, to `log_file` (Triton's --log-file) if
    given."""
    configure_logging(log_settings(settings), log_file)


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
        lifespan=lambda _: runtime.serving(serving_options(settings), link),
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.runtime = runtime
    app.state.http_transport = http_transport(settings)
    errors = ErrorBodies()
    errors.add(openai_routes.PREFIX + "/", openai_error_body)
    install_error_handlers(app, errors)
    include_routes(app, settings, errors, one_process=link is None)
    Instrumentator(
        should_group_status_codes=False,
        excluded_handlers=["/metrics"],
        registry=runtime.metrics_registry,
    ).instrument(app)
    query_key = QueryKey(EVENT_SOURCE_PATH, API_KEY_PARAMETER)
    add_middleware(app, settings, errors, query_key, None if link is None else link.index)
    customise_openapi(app, (GenerateRequest, RepositoryIndexRequest), openai_components)
    return app


def include_routes(
    app: FastAPI, settings: Settings, errors: ErrorBodies, one_process: bool
) -> None:
    """Triton's and KServe's routes (statistics before models: /v2/models/stats is not a
    model's metadata), OpenAI's, the playground, the docs and static files."""
    routers = (
        generate.router,
        health.router,
        statistics.router,
        models.router,
        repository.router,
        *([metrics.router] if settings.allow_metrics else []),
        log_settings_routes.router,
        trace.router,
        openai_routes.router,
    )
    for router in routers:
        app.include_router(router)
    lora = settings.vllm_allow_runtime_lora_updating
    openai_utility.install(app, errors, runtime_lora=lora, one_process=one_process)
    app.include_router(playground.router)
    install_docs_and_static(app)


def openai_components(known: Components) -> Components:
    """The OpenAI routes' vLLM request and response models (vLLM loaded when asked for)."""
    from app.engine.vllm_openai.schemas import openai_components as components

    return components(known)
