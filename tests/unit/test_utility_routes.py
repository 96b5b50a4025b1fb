"""vLLM's utility routes with the engine double: /ping, /version, /tokenize, /detokenize, runtime
LoRA adapters (only with VLLM_ALLOW_RUNTIME_LORA_UPDATING), their errors in vLLM's shape and
their restricted API groups."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.engine.version import vllm_version
from app.http.errors import ErrorBodies, install_error_handlers
from app.openai.errors import openai_error_body
from app.openai.utility import refuse_runtime_lora
from tests.doubles import FakeEngine
from tests.support.openai_routes import error_of
from tests.support.repository import write_model

LORA = {"vllm_allow_runtime_lora_updating": True}


def test_ping_answers_get_and_post_from_the_engines_health(
    client: TestClient, engine: FakeEngine
) -> None:
    assert client.get("/ping").status_code == 200
    assert client.post("/ping").status_code == 200
    engine.healthy = False
    assert client.get("/ping").status_code == 503


def test_version_is_the_installed_vllms(client: TestClient) -> None:
    response = client.get("/version")
    assert response.status_code == 200
    assert response.json() == {"version": vllm_version()}
    assert vllm_version() != "unknown"


def test_tokenize_round_trips_with_detokenize(client: TestClient, engine: FakeEngine) -> None:
    tokens = client.post(
        "/tokenize", json={"model": "fake", "prompt": "Hi!", "return_token_strs": True}
    )
    assert tokens.status_code == 200, tokens.text
    assert tokens.json() == {
        "count": 3,
        "max_model_len": 2048,
        "tokens": [72, 105, 33],
        "token_strs": ["H", "i", "!"],
    }
    text = client.post("/detokenize", json={"model": "fake", "tokens": tokens.json()["tokens"]})
    assert text.json() == {"prompt": "Hi!"}
    assert [call[0] for call in engine.openai_serving.utility.calls] == ["tokenize", "detokenize"]


def test_tokenize_errors_are_in_vllms_shape(client: TestClient) -> None:
    assert (
        error_of(client.post("/tokenize", json={"model": "nope", "prompt": "x"}), 404)["param"]
        == "model"
    )
    assert error_of(client.post("/tokenize", content=b"{not json"), 400)["message"].startswith(
        "The request body"
    )
    assert (
        error_of(client.post("/detokenize", json={"model": "fake", "tokens": "abc"}), 400)["param"]
        == "tokens"
    )


def test_tokenize_bounds_messages_and_tools_before_vllm_reads_them(
    client: TestClient, engine: FakeEngine
) -> None:
    """vLLM's request model reads each message on the event loop (200,000 took 0.6 s): more
    messages or tools than the server's limits are refused first, naming the field."""
    message = {"role": "user", "content": "a"}
    too_many = client.post("/tokenize", json={"model": "fake", "messages": [message] * 200_000})
    error = error_of(too_many, 400)
    assert (error["param"], error["message"]) == (
        "messages",
        "messages: 200000 messages are above this server's limit of 2048",
    )
    tools = [{"type": "function", "function": {"name": "f"}}] * 129
    offered = client.post("/tokenize", json={"messages": [message], "tools": tools})
    assert error_of(offered, 400)["param"] == "tools"
    assert engine.openai_serving.utility.calls == []


def test_the_model_may_be_left_out_when_one_is_served(client: TestClient) -> None:
    assert client.post("/tokenize", json={"prompt": "ok"}).json()["tokens"] == [111, 107]


def test_lora_routes_are_absent_unless_allowed(client: TestClient) -> None:
    assert (
        client.post("/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": "a"}).status_code
        == 404
    )


def test_an_adapter_loaded_at_run_time_is_a_model_id(
    make_client: Callable[..., TestClient], engine: FakeEngine
) -> None:
    client = make_client(engine, **LORA)
    loaded = client.post(
        "/v1/load_lora_adapter", json={"lora_name": "sql", "lora_path": "fake/adapters/sql"}
    )
    assert (
        loaded.status_code == 200
        and loaded.text == "Success: LoRA adapter 'sql' added successfully."
    )
    assert "sql" in [card["id"] for card in client.get("/v1/models").json()["data"]]
    completion = client.post(
        "/v1/completions", json={"model": "sql", "prompt": "Hi", "max_tokens": 2}
    )
    assert completion.status_code == 200
    assert engine.openai_serving.calls[-1]["adapter"] == "sql"
    assert client.post("/tokenize", json={"model": "fake/sql", "prompt": "x"}).status_code == 200
    assert engine.openai_serving.utility.calls[-1][2] == "sql"
    unloaded = client.post("/v1/unload_lora_adapter", json={"lora_name": "sql"})
    assert unloaded.text == "Success: LoRA adapter 'sql' removed successfully."
    assert (
        error_of(client.post("/v1/completions", json={"model": "sql", "prompt": "Hi"}), 404)[
            "param"
        ]
        == "model"
    )
    assert error_of(client.post("/v1/unload_lora_adapter", json={"lora_name": "sql"}), 404)


def test_lora_routes_need_the_base_model_and_lora(
    make_client: Callable[..., TestClient], engine: FakeEngine, tmp_path: Path
) -> None:
    root = tmp_path / "two"
    write_model(root, "fake")
    write_model(root, "other")
    client = make_client(engine, root, **LORA)
    body = {"lora_name": "a", "lora_path": "fake/a"}
    assert (
        "several models"
        in error_of(client.post("/v1/load_lora_adapter", json=body), 400)["message"]
    )
    engine.openai_serving.utility.lora_enabled = False
    assert (
        error_of(client.post("/v1/load_lora_adapter", json={**body, "model": "fake"}), 400)["param"]
        == "model"
    )


UTILITY_BODY = {"prompt": "x", "tokens": [120], "lora_name": "a", "lora_path": "fake"}
"""What each utility route reads (each ignores the others' fields)."""


@pytest.mark.parametrize(
    ("method", "path", "group"),
    [
        ("GET", "/health", "health"),
        ("GET", "/ping", "health"),
        ("POST", "/ping", "health"),
        ("GET", "/version", "metadata"),
        ("POST", "/tokenize", "inference"),
        ("POST", "/detokenize", "inference"),
        ("POST", "/v1/load_lora_adapter", "model-repository"),
        ("POST", "/v1/unload_lora_adapter", "model-repository"),
    ],
)
def test_each_route_is_in_its_restricted_group(
    make_client: Callable[..., TestClient],
    engine: FakeEngine,
    method: str,
    path: str,
    group: str,
) -> None:
    client = make_client(engine, http_restricted_api=[f"{group}:admin-key=secret"], **LORA)
    key = {"admin-key": "secret"}
    body = UTILITY_BODY if method == "POST" else None
    if path == "/v1/unload_lora_adapter":  # an adapter to unload
        assert client.post("/v1/load_lora_adapter", json=body, headers=key).status_code == 200
    assert client.request(method, path, json=body).status_code == 403
    allowed = client.request(method, path, json=body, headers=key)
    assert allowed.status_code == 200, allowed.text
    other_group = "/ping" if group == "metadata" else "/version"
    assert client.get(other_group).status_code == 200, "only the group's routes need the key"


def test_ping_is_open_with_api_keys_as_health_is(
    make_client: Callable[..., TestClient], engine: FakeEngine
) -> None:
    client = make_client(engine, api_keys=["k"])
    assert client.get("/ping").status_code == 200
    assert client.post("/tokenize", json={"prompt": "x"}).status_code == 401


def test_runtime_lora_is_refused_where_one_process_cannot_load_for_all() -> None:
    """With several frontend processes the LoRA routes answer 501 (main.py mounts these)."""
    app = FastAPI()
    errors = ErrorBodies()
    errors.add("/v1/", openai_error_body)
    install_error_handlers(app, errors)
    app.include_router(refuse_runtime_lora("runtime LoRA adapters need FRONTEND_PROCESSES=1"))
    with TestClient(app) as client:
        for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            error = error_of(client.post(path, json={"lora_name": "a", "lora_path": "a"}), 501)
            assert error["message"] == "runtime LoRA adapters need FRONTEND_PROCESSES=1"
