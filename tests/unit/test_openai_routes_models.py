"""The OpenAI frontend's model ids: /v1/models with every version and LoRA adapter, and the
version and adapter a request's `model` picks (or the OpenAI error when none or several
match)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.doubles import FakeEngine
from tests.support.openai_routes import CHAT, COMPLETION, error_of
from tests.support.repository import write_model


def test_model_list_and_one_model(client: TestClient) -> None:
    listed = client.get("/v1/models").json()
    assert listed["object"] == "list"
    assert [(m["id"], m["object"], m["parent"], m["max_model_len"]) for m in listed["data"]] == [
        ("fake", "model", None, 2048)
    ]
    assert client.get("/v1/models/fake").json()["id"] == "fake"
    assert client.get("/v1/models/fake/1").json()["id"] == "fake/1"
    assert error_of(client.get("/v1/models/other"), 404)["type"] == "NotFoundError"


@pytest.fixture
def lora_repository(tmp_path: Path) -> Path:
    """alpha/1 with adapters doc and sql, alpha/2 without; beta/1 with its own adapter sql."""
    root = tmp_path / "multi"
    for name, version, adapters in (
        ("alpha", "1", ["doc", "sql"]),
        ("alpha", "2", []),
        ("beta", "1", ["sql"]),
    ):
        engine_args = (
            {"model": f"/weights/{name}", "enable_lora": True}
            if adapters
            else {"model": f"/weights/{name}"}
        )
        version_dir = write_model(
            root, name, version, config="version_policy: { all { } }", **engine_args
        )
        if adapters:
            (version_dir / "multi_lora.json").write_text(
                json.dumps({a: f"adapters/{a}" for a in adapters})
            )
    return root


@pytest.fixture
def engines() -> dict[str, FakeEngine]:
    return {key: FakeEngine() for key in ("alpha/1", "alpha/2", "beta/1")}


@pytest.fixture
def lora_client(lora_repository: Path, engines: dict[str, FakeEngine]) -> Iterator[TestClient]:
    from app.main import create_app
    from app.settings import Settings

    app = create_app(
        Settings(model_repository=[lora_repository]),
        lambda spec: engines[f"{spec.name}/{spec.version}"],
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_models_list_versions_and_adapters(lora_client: TestClient, lora_repository: Path) -> None:
    cards = {card["id"]: card for card in lora_client.get("/v1/models").json()["data"]}
    assert set(cards) == {"alpha", "alpha/1", "alpha/2", "doc", "alpha/sql", "beta", "beta/sql"}
    assert cards["doc"]["parent"] == "alpha/1" and cards["alpha/sql"]["parent"] == "alpha/1"
    assert cards["beta/sql"]["parent"] == "beta"
    assert cards["doc"]["root"] == "alpha/1/adapters/doc"  # in the repository, never its path
    assert cards["alpha"]["root"] == "alpha" and cards["alpha"]["parent"] is None
    assert lora_client.get("/v1/models/alpha/1/doc").json()["parent"] == "alpha/1"


@pytest.mark.parametrize(
    ("model", "engine", "adapter"),
    [
        ("alpha", "alpha/2", None),
        ("alpha/1", "alpha/1", None),
        ("doc", "alpha/1", "doc"),
        ("alpha/sql", "alpha/1", "sql"),
        ("alpha/1/sql", "alpha/1", "sql"),
        ("beta/sql", "beta/1", "sql"),
    ],
)
def test_model_ids_pick_the_version_and_adapter(
    lora_client: TestClient,
    engines: dict[str, FakeEngine],
    model: str,
    engine: str,
    adapter: str | None,
) -> None:
    response = lora_client.post("/v1/completions", json={**COMPLETION, "model": model})
    assert response.status_code == 200, response.text
    (call,) = engines[engine].openai_serving.calls
    assert call["adapter"] == adapter


@pytest.mark.parametrize("model", ["gamma", "alpha/3", "alpha/2/doc", "alpha/nope", "a/b/c/d"])
def test_unknown_model_ids_are_404(lora_client: TestClient, model: str) -> None:
    error = error_of(lora_client.post("/v1/chat/completions", json={**CHAT, "model": model}), 404)
    assert (
        error["type"] == "NotFoundError" and error["param"] == "model" and model in error["message"]
    )


def test_ambiguous_adapter_and_missing_model_name_the_field(lora_client: TestClient) -> None:
    error = error_of(lora_client.post("/v1/completions", json={**COMPLETION, "model": "sql"}), 400)
    assert (
        error["param"] == "model"
        and "'alpha/sql'" in error["message"]
        and "'beta/sql'" in error["message"]
    )
    body = {key: value for key, value in COMPLETION.items() if key != "model"}
    assert error_of(lora_client.post("/v1/completions", json=body), 400)["param"] == "model"


def test_a_single_model_may_be_left_unnamed(client: TestClient) -> None:
    body = {key: value for key, value in COMPLETION.items() if key != "model"}
    assert client.post("/v1/completions", json=body).status_code == 200


def test_a_model_without_an_openai_api_is_not_listed_or_served(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(FakeEngine(openai=False))
    assert client.get("/v1/models").json()["data"] == []
    assert error_of(client.post("/v1/completions", json=COMPLETION), 404)["param"] == "model"
    assert client.post("/v2/models/fake/generate", json={"text_input": "x"}).status_code == 200
