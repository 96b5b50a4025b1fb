"""`/v1/responses` with the engine double and its OpenAI API double: answered through the
model's API, streams as named SSE events without `[DONE]`, errors (in the body, in a started
stream, for the routes of stored responses), disconnects, the access log and OpenAPI."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.doubles import FakeEngine
from tests.support.access_log import access_fields
from tests.support.asgi import call_and_disconnect
from tests.support.openai_routes import JSON, error_of
from tests.support.waiting import eventually

RESPONSE = {"model": "fake", "input": "Hi", "max_output_tokens": 3}


def events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of a Responses stream; every event is named."""
    pairs = []
    for part in filter(None, text.split("\n\n")):
        name, data = part.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), part
        pairs.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return pairs


def test_a_response_answers_through_the_model_api(client: TestClient, engine: FakeEngine) -> None:
    response = client.post("/v1/responses", json=RESPONSE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "response" and body["model"] == "fake"
    assert body["output"][0]["content"][0]["text"] == "Hello from the"
    (call,) = engine.openai_serving.calls
    assert call["adapter"] is None and call["body"].input == "Hi"


def test_a_stream_is_named_events_without_done(client: TestClient) -> None:
    response = client.post("/v1/responses", json={**RESPONSE, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    pairs = events(response.text)
    names = [name for name, _ in pairs]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    deltas = [data["delta"] for name, data in pairs if name == "response.output_text.delta"]
    assert "".join(deltas) == "Hello from the"
    assert "[DONE]" not in response.text


def test_the_access_log_has_the_input(
    make_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    client = make_client(FakeEngine(), log_prompts=True)
    messages = [{"role": "user", "content": "Hi"}]
    assert client.post("/v1/responses", json={**RESPONSE, "input": messages}).status_code == 200
    (record,) = [
        r
        for r in caplog.records
        if r.name == "app.access" and access_fields(r)["path"] == "/v1/responses"
    ]
    fields = access_fields(record)
    assert (fields["model"], fields["status"], fields["generated_tokens"]) == ("fake", 200, 3)
    assert json.loads(fields["prompt"]) == messages


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b'{"model": "fake", "input": "\\ud800"}', "input"),
        (b'{"model": "fake", "input": "x", "max_output_tokens": "many"}', "max_output_tokens"),
        (b'{"model": "fake"}', "input"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(client: TestClient, body: bytes, param: str) -> None:
    error = error_of(client.post("/v1/responses", content=body, headers=dict(JSON)), 400)
    assert error["param"] == param


def test_input_items_and_their_parts_are_bounded_before_vllm_reads_them(
    client: TestClient, engine: FakeEngine
) -> None:
    """vLLM's `ResponsesRequest` reads each input item in Python, some 60 µs each (200,000
    took 12 s, on the event loop): more items or content parts than the server's limits are
    refused first, naming the field."""
    item = {"role": "user", "content": "a"}
    error = error_of(client.post("/v1/responses", json={**RESPONSE, "input": [item] * 2049}), 400)
    assert (error["param"], error["message"]) == (
        "input",
        "input: 2049 messages are above this server's limit of 2048",
    )
    parts = [{"type": "input_text", "text": "a"}] * 4097
    error = error_of(
        client.post("/v1/responses", json={**RESPONSE, "input": [{**item, "content": parts}]}),
        400,
    )
    assert error["param"] == "input[0].content"
    assert engine.openai_serving.calls == []


def test_unknown_models_are_404(client: TestClient) -> None:
    error = error_of(client.post("/v1/responses", json={**RESPONSE, "model": "other"}), 404)
    assert error["param"] == "model"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/responses/resp_1"), ("POST", "/v1/responses/resp_1/cancel")],
)
def test_stored_responses_are_404_saying_none_is_stored(
    client: TestClient, method: str, path: str
) -> None:
    error = error_of(client.request(method, path), 404)
    assert error["param"] == "response_id" and "does not store responses" in error["message"]
    assert "'resp_1'" in error["message"]


def test_a_stream_the_deadline_ends_ends_with_an_error_event(
    make_client: Callable[..., TestClient],
) -> None:
    engine = FakeEngine(step_delay=0.05)
    client = make_client(engine, request_timeout_seconds=0.3)
    long = {**RESPONSE, "max_output_tokens": 1000}
    error = error_of(client.post("/v1/responses", json=long), 504)
    assert error["message"] == "Request timed out after 0.3 s and was aborted"
    pairs = events(client.post("/v1/responses", json={**long, "stream": True}).text)
    name, data = pairs[-1]
    assert name == "error" and data == {
        "type": "error",
        "code": "GatewayTimeoutError",
        "message": "Request timed out after 0.3 s and was aborted",
        "param": None,
        "sequence_number": len(pairs) - 1,
    }
    assert not engine.active and len(engine.aborted) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_client_disconnect_aborts_the_engine_request(
    make_client: Callable[..., TestClient], stream: bool
) -> None:
    engine = FakeEngine(step_delay=0.05)
    body = json.dumps({**RESPONSE, "max_output_tokens": 1000, "stream": stream}).encode()
    sent = await call_and_disconnect(
        make_client(engine).app, "POST", "/v1/responses", body=body, headers=JSON, seconds=0.3
    )
    assert await eventually(lambda: len(engine.aborted) == 1)
    assert not engine.active
    started = [m for m in sent if m["type"] == "http.response.start"]
    assert started[0]["status"] == (200 if stream else 499)


def test_openapi_documents_the_route_and_vllms_models(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/v1/responses"]["post"]
    assert operation["tags"] == ["openai"]
    body = operation["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"] == "#/components/schemas/ResponsesRequest"
    assert {"input", "stream", "json_schema"} == set(body["examples"])
    content = operation["responses"]["200"]["content"]
    assert content["application/json"]["schema"]["$ref"] == "#/components/schemas/ResponsesResponse"
    assert "event: response.created" in content["text/event-stream"]["example"]
    components = schema["components"]["schemas"]
    assert {"ResponsesRequest", "ResponsesResponse"} <= set(components)
    assert "max_output_tokens" in components["ResponsesRequest"]["properties"]
    assert "/v1/responses/{response_id}" not in schema["paths"]
