"""The OpenAI frontend with the engine double and its OpenAI API double: completions and chats
answered through the model's API, streams as SSE frames, admission and the access log, the
request headers the API gets, and the /v1 routes in the OpenAPI document."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from tests.doubles import FakeEngine
from tests.support.access_log import access_fields
from tests.support.clients import runtime_of
from tests.support.openai_routes import CHAT, COMPLETION, frames
from tests.support.waiting import wait_until
from tests.unit.test_reliability import in_background


def test_completion_and_chat_answer_through_the_model_api(
    client: TestClient, engine: FakeEngine
) -> None:
    completion = client.post("/v1/completions", json=COMPLETION)
    assert completion.status_code == 200
    assert completion.json()["choices"][0]["text"] == "Hello from the"
    assert completion.json()["usage"] == {
        "prompt_tokens": 1,
        "completion_tokens": 3,
        "total_tokens": 4,
    }
    chat = client.post("/v1/chat/completions", json=CHAT)
    assert chat.json()["choices"][0]["message"] == {"role": "assistant", "content": "Hello from"}
    calls = engine.openai_serving.calls
    assert [call["adapter"] for call in calls] == [None, None]
    assert len({call["request_id"] for call in calls}) == 2


def test_streams_are_sse_frames_ending_with_done(client: TestClient) -> None:
    body = {**COMPLETION, "stream": True, "stream_options": {"include_usage": True}}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200 and response.headers["content-type"].startswith(
        "text/event-stream"
    )
    payloads = frames(response.text)
    assert payloads[-1] == "[DONE]"
    texts = [json.loads(p)["choices"][0]["text"] for p in payloads[:-2]]
    assert texts == ["Hello", " from", " the"]
    assert json.loads(payloads[-2])["usage"]["completion_tokens"] == 3


def test_requests_are_admitted_and_logged(
    make_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    engine = FakeEngine()
    client = make_client(engine, log_prompts=True)
    served = runtime_of(client).registry.get("fake")
    with engine.held():
        thread, _ = in_background(client, "/v1/chat/completions", {**CHAT, "max_tokens": 10})
        wait_until(lambda: len(served.in_flight) == 1, timeout=30)
    thread.join()
    assert not served.in_flight
    (record,) = [
        r
        for r in caplog.records
        if r.name == "app.access" and access_fields(r)["path"] == "/v1/chat/completions"
    ]
    fields = access_fields(record)
    assert (fields["model"], fields["version"], fields["status"]) == ("fake", "1", 200)
    assert (
        fields["generated_tokens"] == 10 and fields["prompt_tokens"] == 1 and fields["ttft_ms"] > 0
    )
    assert json.loads(fields["prompt"]) == CHAT["messages"]


def test_request_headers_reach_the_model_api(client: TestClient, engine: FakeEngine) -> None:
    client.post(
        "/v1/completions",
        json=COMPLETION,
        headers={"X-Request-Id": "abc", "traceparent": "00-1-2-01"},
    )
    headers = engine.openai_serving.calls[0]["headers"]
    assert headers["x-request-id"] == "abc" and headers["traceparent"] == "00-1-2-01"


def test_an_unsafe_request_id_header_does_not_reach_the_model_api(
    client: TestClient, engine: FakeEngine
) -> None:
    """vLLM names the request, and each chunk of its answer, by X-Request-Id: one the access
    log would not take (over 128 characters, or other than `._:+=/-` and alphanumerics) is
    left out, and vLLM names the request itself."""
    for unsafe in ("x" * 129, "a b"):
        answer = client.post("/v1/completions", json=COMPLETION, headers={"X-Request-Id": unsafe})
        assert answer.status_code == 200
    assert ["x-request-id" in call["headers"] for call in engine.openai_serving.calls] == [
        False,
        False,
    ]


def test_openapi_documents_the_v1_routes(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    operations = {
        (path, method): op for path, ops in schema["paths"].items() for method, op in ops.items()
    }
    for key in [
        ("/v1/models", "get"),
        ("/v1/models/{model_id}", "get"),
        ("/v1/completions", "post"),
        ("/v1/chat/completions", "post"),
    ]:
        assert operations[key]["tags"] == ["openai"], key
    for path in ("/v1/completions", "/v1/chat/completions"):
        body = operations[(path, "post")]["requestBody"]["content"]["application/json"]
        assert body["examples"] and body["schema"]["$ref"].startswith("#/components/schemas/")
        assert set(operations[(path, "post")]["responses"]["200"]["content"]) == {
            "application/json",
            "text/event-stream",
        }
    assert {"CompletionRequest", "ChatCompletionRequest", "OpenAIErrorResponse"} <= set(
        schema["components"]["schemas"]
    )


def test_the_v1_schemas_are_the_models_that_read_and_write_the_bodies(client: TestClient) -> None:
    """The OpenAPI document's /v1 bodies are vLLM's own request and response models (the
    ones that validate each body), not copies written for the docs."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse
    from vllm.entrypoints.openai.completion.protocol import CompletionResponse

    from app.engine.vllm_openai.compat import ChatCompletionRequest, CompletionRequest

    components = client.get("/openapi.json").json()["components"]["schemas"]
    cases: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (CompletionRequest, "validation"),
        (ChatCompletionRequest, "validation"),
        (CompletionResponse, "serialization"),
        (ChatCompletionResponse, "serialization"),
    ]
    for model, mode in cases:
        expected = model.model_json_schema(mode=mode)
        published = components[model.__name__]
        assert set(published["properties"]) == set(expected["properties"]), model.__name__
        assert set(published.get("required", ())) == set(expected.get("required", ())), (
            model.__name__
        )
