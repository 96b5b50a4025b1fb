"""Every HTTP route and gRPC method declares its API group where it is defined (`api_group`):
a route or method added without one fails here, and each path's group is as Triton's."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from grpc_health.v1 import health_pb2
from starlette.routing import BaseRoute
from tritonclient.grpc import service_pb2

from app.grpc.servicer import SERVICES, method_groups
from app.http.api_groups import route_access, route_handler
from app.main import create_app
from app.openai.utility import refuse_runtime_lora
from app.security.restrictions import ApiAccess, ApiGroup, api_group, declared_access
from app.settings import Settings
from tests.doubles import FakeEngine

G = ApiGroup


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    """The assembled app with every optional route: /metrics and the runtime LoRA routes."""
    repository = Path(tmp_path_factory.mktemp("repo"))
    settings = Settings(
        model_repository=[repository], allow_metrics=True, vllm_allow_runtime_lora_updating=True
    )
    return create_app(settings, engine_factory=lambda spec: FakeEngine())


def undeclared(routes: Iterable[BaseRoute]) -> list[str]:
    return [
        str(getattr(route, "path", route))
        for route in routes
        if declared_access(route_handler(route)) is None
    ]


def test_every_http_route_declares_its_group(app: FastAPI) -> None:
    paths = {getattr(route, "path", "") for route in app.routes}
    assert {"/openapi.json", "/docs", "/static", "/metrics", "/", "/v1/load_lora_adapter"} <= paths
    assert undeclared(app.routes) == []
    assert undeclared(refuse_runtime_lora("several processes").routes) == []


def test_a_route_without_a_declaration_is_found() -> None:
    router = APIRouter()

    @router.get("/declared")
    @api_group(None)
    async def declared() -> None: ...

    @router.get("/forgotten")
    async def forgotten() -> None: ...

    assert undeclared(router.routes) == ["/forgotten"]


def test_every_grpc_method_declares_its_group() -> None:
    """Every method of every service in the descriptors tritonclient and grpcio-health ship."""
    servicers = {service.full_name: servicer for service, servicer in SERVICES}
    descriptors = [
        *service_pb2.DESCRIPTOR.services_by_name.values(),
        *health_pb2.DESCRIPTOR.services_by_name.values(),
    ]
    missing = [
        f"{service.full_name}/{method.name}"
        for service in descriptors
        for method in service.methods
        if declared_access(getattr(servicers.get(service.full_name), method.name, None)) is None
    ]
    assert missing == []


INFERENCE = "/inference.GRPCInferenceService/"
GRPC_GROUPS = {
    **{INFERENCE + name: G.HEALTH for name in ("ServerLive", "ServerReady", "ModelReady")},
    "/grpc.health.v1.Health/Check": G.HEALTH,
    "/grpc.health.v1.Health/Watch": G.HEALTH,
    **{INFERENCE + name: G.METADATA for name in ("ServerMetadata", "ModelMetadata")},
    **{INFERENCE + name: G.INFERENCE for name in ("ModelInfer", "ModelStreamInfer")},
    INFERENCE + "ModelConfig": G.MODEL_CONFIG,
    INFERENCE + "ModelStatistics": G.STATISTICS,
    **{
        INFERENCE + name: G.MODEL_REPOSITORY
        for name in ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload")
    },
    INFERENCE + "TraceSetting": G.TRACE,
    INFERENCE + "LogSettings": G.LOGGING,
    **{
        f"{INFERENCE}{kind}SharedMemory{verb}": G.SHARED_MEMORY
        for kind in ("System", "Cuda")
        for verb in ("Status", "Register", "Unregister")
    },
}


def test_each_grpc_method_is_in_tritons_group() -> None:
    assert method_groups() == GRPC_GROUPS


MODEL, VERSION = "/v2/models/m", "/v2/models/m/versions/1"
STATE = True
HTTP_GROUPS: list[tuple[str, str, ApiGroup | None, bool]] = [
    *[
        ("POST", f"{base}/{verb}", G.INFERENCE, False)
        for base in (MODEL, VERSION)
        for verb in ("generate", "generate_stream", "infer")
    ],
    ("GET", f"{MODEL}/generate_stream", G.INFERENCE, False),
    ("GET", f"{VERSION}/generate_stream", G.INFERENCE, False),
    *[("GET", path, G.HEALTH, False) for path in ("/v2/health/live", "/v2/health/ready")],
    *[("GET", path, G.HEALTH, False) for path in ("/health", f"{MODEL}/ready", f"{VERSION}/ready")],
    ("GET", "/ping", G.HEALTH, False),
    ("POST", "/ping", G.HEALTH, False),
    *[("GET", path, G.STATISTICS, False) for path in ("/v2/models/stats", f"{MODEL}/stats")],
    ("GET", f"{VERSION}/stats", G.STATISTICS, False),
    ("DELETE", "/v2/models/stats", G.STATISTICS, False),  # the path's group, whatever the method
    *[("GET", path, G.METADATA, False) for path in ("/v2", MODEL, VERSION, "/version")],
    ("POST", MODEL, G.METADATA, False),
    *[("GET", path, G.MODEL_CONFIG, False) for path in (f"{MODEL}/config", f"{VERSION}/config")],
    ("POST", "/v2/repository/index", G.MODEL_REPOSITORY, False),
    ("POST", "/v2/repository/models/m/load", G.MODEL_REPOSITORY, STATE),
    ("POST", "/v2/repository/models/m/unload", G.MODEL_REPOSITORY, STATE),
    ("GET", "/v2/logging", G.LOGGING, False),
    ("POST", "/v2/logging", G.LOGGING, STATE),
    *[("GET", path, G.TRACE, False) for path in ("/v2/trace/setting", f"{MODEL}/trace/setting")],
    *[("POST", path, G.TRACE, STATE) for path in ("/v2/trace/setting", f"{MODEL}/trace/setting")],
    ("GET", "/v1/models", G.MODEL_REPOSITORY, False),
    ("GET", "/v1/models/org/m", G.MODEL_REPOSITORY, False),
    *[
        ("POST", f"/v1/{path}_lora_adapter", G.MODEL_REPOSITORY, STATE)
        for path in ("load", "unload")
    ],
    *[("POST", path, G.INFERENCE, False) for path in ("/tokenize", "/detokenize")],
    *[("POST", f"/v1/{path}", G.INFERENCE, False) for path in ("completions", "chat/completions")],
    *[("POST", path, G.INFERENCE, False) for path in ("/v1/responses", "/v1/responses/r/cancel")],
    ("GET", "/v1/responses/r", G.INFERENCE, False),
    *[("GET", path, None, False) for path in ("/", "/docs", "/redoc", "/docs/oauth2-redirect")],
    *[("GET", path, None, False) for path in ("/metrics", "/openapi.json", "/static/x.js")],
]


@pytest.mark.parametrize(("method", "path", "group", "changes_state"), HTTP_GROUPS)
def test_each_http_route_is_in_tritons_group(
    app: FastAPI, method: str, path: str, group: ApiGroup | None, changes_state: bool
) -> None:
    scope: dict[str, Any] = {"type": "http", "method": method, "path": path, "root_path": ""}
    assert route_access(app.routes, scope) == ApiAccess(group, changes_state)


def test_a_path_no_route_serves_is_in_no_group(app: FastAPI) -> None:
    scope = {"type": "http", "method": "GET", "path": "/v2/nowhere", "root_path": ""}
    assert route_access(app.routes, scope) is None
