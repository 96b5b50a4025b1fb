"""Who may reach the server by which name, and what its answers show (engine double): a DNS
rebinding page (its own name, resolved to the server's address) is refused while clients
that are not browsers, addresses and the server's names are served; /v1/models never shows
a path on the server; KServe `infer` gets Triton's answer for decoupled models."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.http.access import HostNames
from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.repository import EXPLICIT_CONTROL, write_model

BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
LOAD = "/v2/repository/models/fake/load"


def client_at(base_url: str, repository: Path, **settings: Any) -> TestClient:
    """A started app reached at `base_url` (its Host header), with `settings`."""
    app = create_app(
        Settings(model_repository=[repository], **EXPLICIT_CONTROL, **settings),
        engine_factory=lambda spec: FakeEngine(),
    )
    return TestClient(app, base_url=base_url, raise_server_exceptions=False)


@pytest.mark.parametrize(
    ("host", "configured", "allowed"),
    [
        ("127.0.0.1:8000", [], True),
        ("10.1.2.3", [], True),
        ("[::1]:8000", [], True),
        ("localhost:8000", [], True),
        ("app.localhost", [], True),
        ("LOCALHOST.", [], True),
        ("evil.example:8000", [], False),
        ("localhost.evil.example", [], False),
        ("triton.internal:8000", ["triton.internal"], True),
        ("api.example.com", [".example.com"], True),
        ("example.com", [".example.com"], True),
        ("badexample.com", [".example.com"], False),
        ("evil.example", ["*"], True),
        ("", [], False),
    ],
)
def test_host_names_are_addresses_localhost_the_hosts_own_and_the_configured(
    host: str, configured: list[str], allowed: bool
) -> None:
    assert HostNames(configured, own=["gpu-box"]).allows(host) is allowed
    assert HostNames(own=["gpu-box"]).allows("GPU-box:8000")


def test_a_dns_rebinding_page_can_neither_change_nor_read_the_server(repository: Path) -> None:
    """The page at http://evil.example:8000, its name rebound to the server's address: the
    browser sends Host and Origin of that name. Load, generate and a read are refused."""
    page = {"Origin": "http://evil.example:8000", "User-Agent": BROWSER}
    with client_at("http://evil.example:8000", repository) as client:
        load = client.post(LOAD, json={}, headers=page)
        assert load.status_code == 403
        assert "Host 'evil.example:8000' is not a name of this server" in load.json()["error"]
        assert "ALLOWED_HOSTS" in load.json()["error"]
        generate = client.post("/v2/models/fake/generate", json={"text_input": "x"}, headers=page)
        assert generate.status_code == 403
        same_origin_read = client.get("/v1/models", headers={"User-Agent": BROWSER})
        assert same_origin_read.status_code == 403


def test_clients_that_are_not_browsers_reach_it_by_any_name(repository: Path) -> None:
    """curl, SDKs and probes send no Origin: a service name or any Host is served."""
    with client_at("http://triton.default.svc:8000", repository) as client:
        for agent in ("curl/8.5.0", "python-httpx/0.28", "kube-probe/1.30", "OpenAI/Python 1.0"):
            headers = {"User-Agent": agent}
            assert client.get("/v2/health/ready", headers=headers).status_code == 200
            assert client.post(LOAD, json={}, headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("base_url", "settings"),
    [
        ("http://localhost:8000", {}),
        ("http://127.0.0.1:8000", {}),
        ("http://[::1]:8000", {}),
        ("http://triton.example.com:8000", {"allowed_hosts": ".example.com"}),
        ("http://evil.example:8000", {"allowed_hosts": "*"}),
    ],
)
def test_the_playground_served_by_the_server_may_change_it(
    repository: Path, base_url: str, settings: dict[str, str]
) -> None:
    page = {"Origin": base_url, "User-Agent": BROWSER}
    with client_at(base_url, repository, **settings) as client:
        assert client.get("/", headers={"User-Agent": BROWSER}).status_code == 200
        assert client.post(LOAD, json={}, headers=page).status_code == 200


def test_a_cors_allowed_origin_reaches_it_by_a_name_not_listed(repository: Path) -> None:
    """A page CORS allows calls the server by whatever name it has (a rebinding page cannot
    send that origin); another page's state-changing call stays refused."""
    cors = {"cors_allow_origins": "https://ui.example"}
    with client_at("http://triton.internal:8000", repository, **cors) as client:
        allowed = {"Origin": "https://ui.example", "User-Agent": BROWSER}
        assert client.post(LOAD, json={}, headers=allowed).status_code == 200
        other = {"Origin": "https://other.example", "User-Agent": BROWSER}
        assert client.post(LOAD, json={}, headers=other).status_code == 403


def model_root(repository: Path, name: str, model: str) -> Any:
    """/v1/models/<name>'s root for a model whose model.json names `model`."""
    write_model(repository, name, model=model)
    with client_at("http://localhost", repository) as client:
        return client.get(f"/v1/models/{name}").json()["root"]


def test_v1_models_never_shows_a_path_on_the_server(repository: Path, tmp_path: Path) -> None:
    weights = tmp_path / "weights" / "smollm2"
    assert model_root(repository, "outside", model=str(weights)) == "outside"
    inside = repository / "inside" / "1" / "weights"
    assert model_root(repository, "inside", model=str(inside)) == "inside/1/weights"
    hub_id = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert model_root(repository, "hub", model=hub_id) == hub_id


DECOUPLED = "HTTP end point doesn't support models with decoupled transaction policy"


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("/v2/models/fake/infer", 501, DECOUPLED),
        ("/v2/models/fake/versions/1/infer", 501, DECOUPLED),
        ("/v2/models/other/infer", 404, "Request for unknown model: 'other' is not found"),
        ("/v2/models/fake/versions/9/infer", 404, None),
    ],
)
def test_kserve_infer_gets_tritons_answer_for_decoupled_models(
    make_client: Callable[..., TestClient], path: str, status: int, error: str | None
) -> None:
    inputs = {"inputs": [{"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}
    response = make_client(FakeEngine()).post(path, json=inputs)
    assert response.status_code == status
    assert error is None or response.json() == {"error": error}
