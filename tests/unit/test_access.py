"""Who may call what (engine double): Triton's model control modes, its restricted API groups
on HTTP and gRPC (with API keys too), the cross-site guard on every state-changing route, TLS
and the request-header deadline."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
import pytest
import tritonclient.grpc as triton_grpc
from fastapi.testclient import TestClient
from pydantic import ValidationError
from tritonclient.utils import InferenceServerException

from app.grpc.observe import UNAUTHORIZED_MESSAGE
from app.main import create_app, create_grpc_server
from app.security.restrictions import RestrictionSyntaxError, parse_restrictions
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.asgi import free_ports, serve_in_thread
from tests.support.repository import EXPLICIT_CONTROL, write_model
from tests.support.tls import make_pki
from tests.support.triton_grpc import serve_grpc_app

MODE_REFUSAL = "explicit model load / unload is not allowed if polling is enabled"
ADMIN = {"admin-key": "s3cret"}
RESTRICTED = {
    "http_restricted_api": "model-repository,model-config:admin-key=s3cret;inference:user-key=u",
    "grpc_restricted_protocol": "model-repository:admin-key=s3cret",
}


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "health",
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health",
        ),
        ("health:key=", "option format is"),
        ("bogus:key=v", "unknown restricted api 'bogus'"),
        (
            "health:a=1;health:b=2",
            "restricted api 'health' can not be specified in multiple config groups",
        ),
    ],
)
def test_restriction_options_fail_with_tritons_messages(option: str, message: str) -> None:
    with pytest.raises(RestrictionSyntaxError, match=message):
        parse_restrictions(option.split(";"), "http-restricted-api")
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Settings.model_validate({"http_restricted_api": option})  # the option as a string


def test_load_model_needs_explicit_mode_as_in_triton() -> None:
    with pytest.raises(
        ValidationError,
        match="Use of '--load-model' requires setting '--model-control-mode=explicit'",
    ):
        Settings(load_model=["fake"])
    with pytest.raises(ValidationError, match="must be the only"):
        Settings(model_control_mode="explicit", load_model=["*", "fake"])


def test_none_mode_refuses_load_and_unload_and_keeps_serving(client: TestClient) -> None:
    for action in ("load", "unload"):
        response = client.post(f"/v2/repository/models/fake/{action}")
        assert (response.status_code, response.json()) == (503, {"error": MODE_REFUSAL})
    assert client.get("/v2/models/fake/ready").status_code == 200


def test_none_mode_refuses_load_and_unload_over_grpc(repository: Path) -> None:
    with serve_grpc_app(repository, lambda spec: FakeEngine()) as served:
        client = triton_grpc.InferenceServerClient(served.grpc_url)
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as refused:
                call("fake")
            assert (refused.value.status(), refused.value.message()) == (
                "StatusCode.UNAVAILABLE",
                MODE_REFUSAL,
            )
        assert client.is_model_ready("fake")


def test_explicit_mode_starts_only_the_chosen_models(
    make_client: Callable[..., TestClient], tmp_path: Path
) -> None:
    root = tmp_path / "two"
    write_model(root, "alpha")
    write_model(root, "beta")
    client = make_client(FakeEngine(), root, model_control_mode="explicit", load_model=["alpha"])
    assert client.post("/v2/repository/index").json() == [
        {"name": "alpha", "version": "1", "state": "READY"},
        {"name": "beta"},
    ]
    assert client.post("/v2/repository/models/beta/load").status_code == 200
    assert client.get("/v2/models/beta/ready").status_code == 200
    nothing = make_client(FakeEngine(), root, model_control_mode="explicit")
    assert nothing.post("/v2/repository/index").json() == [{"name": "alpha"}, {"name": "beta"}]


def test_restricted_http_groups_need_their_header(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), **EXPLICIT_CONTROL, **RESTRICTED)
    refused = client.post("/v2/repository/index")
    assert (refused.status_code, refused.json()) == (
        403,
        {"error": "This API is restricted, expecting header 'admin-key'"},
    )
    assert client.post("/v2/repository/index", headers={"admin-key": "wrong"}).status_code == 403
    assert client.post("/v2/repository/index", headers=ADMIN).status_code == 200
    assert client.get("/v2/models/fake/config").status_code == 403
    assert client.post("/v2/models/fake/generate", json={"text_input": "x"}).status_code == 403
    assert (
        client.post(
            "/v2/models/fake/generate", json={"text_input": "x"}, headers={"user-key": "u"}
        ).status_code
        == 200
    )
    openai = client.post("/v1/completions", json={"model": "fake", "prompt": "x"})
    assert (
        openai.status_code == 403
        and "expecting header 'user-key'" in openai.json()["error"]["message"]
    )
    assert client.get("/v1/models").status_code == 403
    assert (
        client.get("/v2/health/ready").status_code == 200
        and client.get("/v2/models/fake").status_code == 200
    )


def test_restricted_grpc_protocols_need_their_metadata(repository: Path) -> None:
    settings = {**EXPLICIT_CONTROL, **RESTRICTED}
    with serve_grpc_app(repository, lambda spec: FakeEngine(), **settings) as served:
        client = triton_grpc.InferenceServerClient(served.grpc_url)
        with pytest.raises(InferenceServerException) as refused:
            client.get_model_repository_index()
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert (
            refused.value.message()
            == "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
        )
        headers = {"triton-grpc-protocol-admin-key": "s3cret"}
        assert client.get_model_repository_index(headers=headers).models
        client.unload_model("fake", headers=headers)
        client.load_model("fake", headers=headers)
        assert (
            client.is_model_ready("fake") and client.get_model_config("fake").config.name == "fake"
        )


KEYED = {
    "api_keys": ["k1"],
    "http_restricted_api": "model-config:admin-key=s3cret",
    "grpc_restricted_protocol": "model-config:admin-key=s3cret",
}
KEY = {"Authorization": "Bearer k1"}


def test_api_keys_and_restricted_groups_both_apply_over_http(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(FakeEngine(), **KEYED)
    path = "/v2/models/fake/config"
    for headers in ({}, ADMIN, {"Authorization": "Bearer wrong", **ADMIN}):
        refused = client.get(path, headers=headers)
        assert refused.status_code == 401 and "API key" in refused.json()["error"]
    without_header = client.get(path, headers=KEY)
    assert (without_header.status_code, without_header.json()) == (
        403,
        {"error": "This API is restricted, expecting header 'admin-key'"},
    )
    assert client.get(path, headers={**KEY, **ADMIN}).status_code == 200
    assert client.get("/v2/models/fake", headers=KEY).status_code == 200


def test_api_keys_and_restricted_groups_both_apply_over_grpc(repository: Path) -> None:
    key = {"authorization": "Bearer k1"}
    group = {"triton-grpc-protocol-admin-key": "s3cret"}
    with serve_grpc_app(repository, lambda spec: FakeEngine(), **KEYED) as served:
        client = triton_grpc.InferenceServerClient(served.grpc_url)
        refusals = []
        for headers in (key, group):
            with pytest.raises(InferenceServerException) as refused:
                client.get_model_config("fake", headers=headers)
            refusals.append((refused.value.status(), refused.value.message()))
        assert client.get_model_config("fake", headers={**key, **group}).config.name == "fake"
        assert client.get_model_metadata("fake", headers=key).name == "fake"
    assert refusals == [
        (
            "StatusCode.UNAVAILABLE",
            "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'",
        ),
        ("StatusCode.UNAUTHENTICATED", UNAUTHORIZED_MESSAGE),
    ]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ({"Content-Type": "multipart/form-data; boundary=x"}, 415),
        ({"Content-Type": "application/json", "Origin": "https://evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Content-Type": "application/json", "Origin": "https://ui.example"}, 200),
        ({"Content-Type": "application/json", "Origin": "http://testserver"}, 200),
        ({"Content-Type": "application/json"}, 200),
        ({}, 200),
    ],
)
def test_state_changing_routes_refuse_other_origins_pages(
    make_client: Callable[..., TestClient], headers: dict[str, str], status: int
) -> None:
    client = make_client(
        FakeEngine(),
        **EXPLICIT_CONTROL,
        cors_allow_origins="https://ui.example",
        allowed_hosts="testserver",  # TestClient's Host, as the server's name
    )
    response = client.post(
        "/v2/repository/models/fake/load", content=b"{}" if headers else b"", headers=headers
    )
    assert response.status_code == status, response.text
    generate = client.post(
        "/v2/models/fake/generate",
        json={"text_input": "x"},
        headers={"Origin": "https://evil.example"},
    )
    assert generate.status_code == 200


STATE_CHANGES = [
    ("/v2/repository/models/fake/unload", {}),
    ("/v2/trace/setting", {"trace_rate": "2"}),
    ("/v2/models/fake/trace/setting", {"trace_rate": "3"}),
    ("/v2/logging", {"log_info": True}),  # the process's log settings: left as they are
    ("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "fake/a"}),
    ("/v1/unload_lora_adapter", {"lora_name": "a"}),
]
FOREIGN_PAGES = [
    ({"Content-Type": "text/plain"}, 415),
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
    ({"Content-Type": "multipart/form-data; boundary=x"}, 415),
    ({"Content-Type": "application/json", "Origin": "https://evil.example"}, 403),
    ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403),
]


@pytest.mark.parametrize(("path", "body"), STATE_CHANGES, ids=[path for path, _ in STATE_CHANGES])
def test_every_other_state_changing_route_refuses_other_origins_pages(
    make_client: Callable[..., TestClient], path: str, body: dict[str, object]
) -> None:
    """Unload, trace and log settings, runtime LoRA: as load, refused from another origin's
    page or with a body a page may send unasked; taken from an allowed origin."""
    engine = FakeEngine()
    client = make_client(
        engine,
        **EXPLICIT_CONTROL,
        cors_allow_origins="https://ui.example",
        vllm_allow_runtime_lora_updating=True,
        allowed_hosts="testserver",
    )
    adapters = engine.openai_serving.utility.adapters
    if path == "/v1/unload_lora_adapter":
        adapters["a"] = "fake/a"
    before = (client.get("/v2/trace/setting").json(), client.get("/v2/logging").json())
    content = json.dumps(body).encode()
    for headers, status in FOREIGN_PAGES:
        response = client.post(path, content=content, headers=headers)
        assert response.status_code == status, (headers, response.text)
    assert (client.get("/v2/trace/setting").json(), client.get("/v2/logging").json()) == before
    assert client.get("/v2/models/fake/ready").status_code == 200
    assert list(adapters) == (["a"] if path == "/v1/unload_lora_adapter" else [])
    allowed = {"Content-Type": "application/json", "Origin": "https://ui.example"}
    assert client.post(path, content=content, headers=allowed).status_code == 200


def test_grpc_over_tls_and_http_with_client_certificates(repository: Path, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    http_port, grpc_port = free_ports(2)
    settings = Settings(
        model_repository=[repository],
        grpc_port=grpc_port,
        grpc_use_ssl=True,
        grpc_server_cert=pki.server_cert,
        grpc_server_key=pki.server_key,
        http_ssl_certfile=pki.server_cert,
        http_ssl_keyfile=pki.server_key,
        http_ssl_ca_certs=pki.ca_cert,
    )
    app = create_app(settings, engine_factory=lambda spec: FakeEngine())
    with serve_in_thread(app, create_grpc_server(settings, app.state.runtime), http_port) as url:
        assert url.startswith("https://")
        client = triton_grpc.InferenceServerClient(
            f"127.0.0.1:{grpc_port}", ssl=True, root_certificates=str(pki.ca_cert)
        )
        assert client.is_server_ready()
        with pytest.raises(InferenceServerException):
            triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}").is_server_ready()
        with httpx.Client(verify=pki.client_context()) as https:
            assert https.get(f"{url}/v2/health/ready").status_code == 200
        anonymous_context = ssl.create_default_context(cafile=str(pki.ca_cert))
        with (
            pytest.raises(httpx.TransportError),
            httpx.Client(verify=anonymous_context) as anonymous,
        ):
            anonymous.get(f"{url}/v2/health/ready")


def test_grpc_mutual_tls_refuses_clients_without_a_certificate(
    repository: Path, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    tls = {
        "grpc_use_ssl_mutual": True,
        "grpc_server_cert": pki.server_cert,
        "grpc_server_key": pki.server_key,
        "grpc_root_cert": pki.ca_cert,
    }
    with serve_grpc_app(repository, lambda spec: FakeEngine(), **tls) as served:
        client = triton_grpc.InferenceServerClient(
            served.grpc_url,
            ssl=True,
            root_certificates=str(pki.ca_cert),
            private_key=str(pki.client_key),
            certificate_chain=str(pki.client_cert),
        )
        assert client.is_model_ready("fake")
        anonymous = grpc.secure_channel(
            served.grpc_url, grpc.ssl_channel_credentials(pki.ca_cert.read_bytes())
        )
        with pytest.raises(grpc.FutureTimeoutError):
            grpc.channel_ready_future(anonymous).result(timeout=3)


def test_a_client_too_slow_with_its_headers_is_disconnected(repository: Path) -> None:
    app = create_app(
        Settings(model_repository=[repository], http_header_timeout_seconds=0.5),
        engine_factory=lambda spec: FakeEngine(),
    )
    with serve_in_thread(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as slow:
            slow.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            assert slow.recv(1024) == b""
            assert time.monotonic() - started < 3
        with socket.create_connection((host, int(port)), timeout=5) as idle:
            assert idle.recv(1024) == b""
        assert httpx.get(f"{url}/v2/health/ready").status_code == 200
