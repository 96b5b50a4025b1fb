"""HTTP layer with the engine double: routes, SSE framing, errors, disconnects."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.errors import InvalidRequestError, ServerError
from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.asgi import call_and_disconnect
from tests.support.repository import write_model
from tests.support.sse import sse_events
from tests.support.waiting import eventually

JSON = [(b"content-type", b"application/json")]


@pytest.mark.parametrize(
    "path", ["/v2/models/fake/generate", "/v2/models/fake/versions/1/generate"]
)
def test_generate_returns_one_json_response_with_the_prompt_prepended(
    client: TestClient, path: str
) -> None:
    response = client.post(path, json={"text_input": "Hi:", "parameters": {"max_tokens": 3}})
    assert response.status_code == 200
    assert response.json() == {
        "model_name": "fake",
        "model_version": "1",
        "text_output": "Hi:Hello from the",
    }


def test_generate_accepts_curl_form_content_type(client: TestClient) -> None:
    response = client.post(
        "/v2/models/fake/generate",
        content='{"text_input": "x", "parameters": {"stream": false, "temperature": 0}}',
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 200 and response.json()["text_output"].startswith("x")


def test_generate_stream_sends_one_delta_per_step(client: TestClient) -> None:
    response = client.post(
        "/v2/models/fake/generate_stream",
        json={"text_input": "x", "parameters": {"max_tokens": 4}, "return_finish_reason": True},
    )
    events = sse_events(response)
    assert [e["text_output"] for e in events] == ["Hello", " from", " the", " fake"]
    assert [e["finish_reason"] for e in events] == [None, None, None, "length"]
    assert all(e["model_name"] == "fake" and e["model_version"] == "1" for e in events)


def test_stream_deltas_concatenate_to_the_non_stream_text(client: TestClient) -> None:
    body = {"text_input": "x", "parameters": {"max_tokens": 6}, "exclude_input_in_output": True}
    whole = client.post("/v2/models/fake/generate", json=body).json()["text_output"]
    events = sse_events(client.post("/v2/models/fake/generate_stream", json=body))
    assert "".join(e["text_output"] for e in events) == whole


def test_stream_false_sends_one_final_event_with_the_prompt(client: TestClient) -> None:
    events = sse_events(
        client.post(
            "/v2/models/fake/generate_stream",
            json={"text_input": "Q", "stream": False, "parameters": {"max_tokens": 2}},
        )
    )
    assert [e["text_output"] for e in events] == ["QHello from"]


def test_n_two_gives_lists_in_every_event(client: TestClient) -> None:
    body = {
        "text_input": "x",
        "parameters": {"n": 2, "temperature": 1, "max_tokens": 2},
        "return_num_output_tokens": True,
    }
    result = client.post(
        "/v2/models/fake/generate", json={**body, "exclude_input_in_output": True}
    ).json()
    assert result["text_output"] == ["Hello from", " from the"] and result["num_output_tokens"] == [
        2,
        2,
    ]
    events = sse_events(client.post("/v2/models/fake/generate_stream", json=body))
    assert [e["text_output"] for e in events] == [["Hello", " from"], [" from", " the"]]


def test_stop_strings_end_generation(client: TestClient) -> None:
    body = {
        "text_input": "",
        "parameters": {"stop": ["fake"], "max_tokens": 10},
        "return_finish_reason": True,
    }
    result = client.post("/v2/models/fake/generate", json=body).json()
    assert result == {
        "model_name": "fake",
        "model_version": "1",
        "text_output": "Hello from the",
        "finish_reason": "stop",
    }


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ('{"parameters": {}}', 400, "text_input: Field required"),
        ("{nope", 400, "body: Invalid JSON"),
        ("", 400, "request body is empty"),
        ("[1, 2]", 400, "body: Input should be an object"),
        ('{"text_input": "x", "parameters": {"temperature": -1}}', 400, "parameters.temperature"),
        (
            '{"text_input": "x", "parameters": {"foo": 1}}',
            400,
            "parameters.foo: unknown sampling parameter",
        ),
        (
            '{"text_input": "x", "parameters": {"prompt_logprobs": 1}}',
            400,
            "parameters.prompt_logprobs: not taken from a request: Triton's outputs carry no "
            "prompt log-probabilities",
        ),
        (
            '{"text_input": "x", "parameters": {"output_kind": 1}}',
            400,
            "parameters.output_kind: not taken from a request: the server sets it",
        ),
        ('{"text_input": "x", "stream": true}', 400, "use /generate_stream"),
        (
            '{"text_input": "x", "parameters": {"lora_name": "a"}}',
            400,
            "LoRA feature is not enabled.",
        ),
        (b'{"text_input": "\xff\xfe"}', 400, "body: Invalid JSON"),
    ],
)
def test_bad_bodies_get_400_with_a_field_named(
    client: TestClient, body: str, status: int, message: str
) -> None:
    response = client.post("/v2/models/fake/generate", content=body)
    assert response.status_code == status
    assert set(response.json()) == {"error"} and message in response.json()["error"]


def test_bad_stream_body_is_a_plain_json_error(client: TestClient) -> None:
    response = client.post(
        "/v2/models/fake/generate_stream",
        json={"text_input": "x", "exclude_input_in_output": False},
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": "Error generating stream: When streaming, "
        "`exclude_input_in_output` = False is not allowed."
    }


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v2/models/other/generate", "Request for unknown model: 'other' is not found"),
        (
            "/v2/models/fake/versions/7/generate_stream",
            "Request for unknown model: 'fake' version 7 is not found",
        ),
    ],
)
def test_unknown_model_or_version_is_404_naming_it(
    client: TestClient, path: str, message: str
) -> None:
    response = client.post(path, json={"text_input": "x"})
    assert response.status_code == 404 and response.json() == {"error": message}


def test_unknown_route_and_wrong_method_answer_triton_error_json(client: TestClient) -> None:
    assert client.get("/v2/nothing").json() == {"error": "Not Found"}
    response = client.get("/v2/models/fake/generate")
    assert response.status_code == 405 and "error" in response.json()


def test_engine_refusal_is_a_json_error(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(fail_with=InvalidRequestError("prompt is too long")))
    for route in ("generate", "generate_stream"):
        response = client.post(f"/v2/models/fake/{route}", json={"text_input": "x"})
        assert response.status_code == 400 and response.json() == {"error": "prompt is too long"}


async def test_a_stream_starts_once_the_engine_accepts_the_request(
    make_client: Callable[..., TestClient],
) -> None:
    """Not at its first token: the client reads the headers while the engine prefills, as
    with `vllm serve`, so they are not on the first token's way."""
    engine = FakeEngine(step_delay=1.0)
    body = json.dumps({"text_input": "x", "parameters": {"max_tokens": 3}}).encode()
    sent = await call_and_disconnect(
        make_client(engine).app,
        "POST",
        "/v2/models/fake/generate_stream",
        body=body,
        headers=JSON,
        seconds=0.3,
    )
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [200]
    assert not [m for m in sent if m.get("body", b"").startswith(b"data:")]
    assert await eventually(lambda: engine.aborted == [engine.requests[0].request_id])


def test_engine_failure_before_the_first_token_once_accepted_is_an_error_event(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(
        FakeEngine(fail_after=0, fail_with=ServerError("engine broke"), step_delay=0.05)
    )
    response = client.post("/v2/models/fake/generate_stream", json={"text_input": "x"})
    assert response.status_code == 200 and sse_events(response) == [{"error": "engine broke"}]
    plain = client.post("/v2/models/fake/generate", json={"text_input": "x"})
    assert plain.status_code == 500 and plain.json() == {"error": "engine broke"}


def test_engine_failure_after_first_token_is_an_error_event(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(FakeEngine(fail_after=2, fail_with=ServerError("engine broke")))
    response = client.post(
        "/v2/models/fake/generate_stream", json={"text_input": "x", "parameters": {"max_tokens": 5}}
    )
    assert response.status_code == 200
    assert sse_events(response) == [
        {"model_name": "fake", "model_version": "1", "text_output": "Hello"},
        {"model_name": "fake", "model_version": "1", "text_output": " from"},
        {"error": "engine broke"},
    ]


def test_unhealthy_engine_answers_503(client: TestClient, engine: FakeEngine) -> None:
    engine.healthy = False
    response = client.post("/v2/models/fake/generate", json={"text_input": "x"})
    assert response.status_code == 503
    assert response.json() == {"error": "Model is unavailable due to unhealthy vLLM engine"}
    assert client.get("/v2/health/ready").status_code == 503
    assert client.get("/v2/health/live").status_code == 200


def test_lifespan_starts_and_stops_the_engine(make_client: Callable[..., TestClient]) -> None:
    engine = FakeEngine()
    client = make_client(engine)
    assert engine.started and not engine.stopped
    client.__exit__(None, None, None)
    assert engine.stopped


def test_versions_route_to_their_own_engines(tmp_path: Path) -> None:
    for version in ("1", "2"):
        write_model(tmp_path, "m", version, config="version_policy: { all { } }")
    engines = {"1": FakeEngine(), "2": FakeEngine()}
    app = create_app(
        Settings(model_repository=[tmp_path]), engine_factory=lambda spec: engines[spec.version]
    )
    with TestClient(app) as client:
        assert (
            client.post("/v2/models/m/generate", json={"text_input": "x"}).json()["model_version"]
            == "2"
        )
        assert (
            client.post("/v2/models/m/versions/1/generate", json={"text_input": "x"}).json()[
                "model_version"
            ]
            == "1"
        )
    assert len(engines["1"].requests) == 1 and len(engines["2"].requests) == 1


def test_openapi_documents_the_generate_body(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v2/models/{model_name}/generate"]["post"]["requestBody"]
    assert (
        body["content"]["application/json"]["schema"]["$ref"]
        == "#/components/schemas/GenerateRequest"
    )
    assert "text_input" in schema["components"]["schemas"]["GenerateRequest"]["properties"]
    assert "temperature" in schema["components"]["schemas"]["SamplingParameters"]["properties"]


async def test_client_disconnect_aborts_the_engine_request(repository: Path) -> None:
    """Both routes: a client that leaves mid-request leaves no engine request running."""
    engine = FakeEngine(step_delay=0.05)
    app = create_app(Settings(model_repository=[repository]), engine_factory=lambda spec: engine)
    body = {"text_input": "x", "parameters": {"max_tokens": 1000}}
    async with app.router.lifespan_context(app):
        for route in ("generate", "generate_stream"):
            await call_and_disconnect(
                app,
                "POST",
                f"/v2/models/fake/{route}",
                body=json.dumps(body).encode(),
                headers=JSON,
            )
            await eventually(lambda: not engine.active)
            assert not engine.active, route
    assert len(engine.aborted) == 2
