"""The OpenAI frontend with the engine double and its OpenAI API double: model ids, errors in
OpenAI's shape (including the middleware's), admission, limits, disconnects, access log."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.doubles import FakeEngine
from tests.support.asgi import call_and_disconnect
from tests.support.repository import write_model
from tests.support.waiting import eventually, wait_until
from tests.unit.test_reliability import in_background

COMPLETION = {"model": "fake", "prompt": "Hi", "max_tokens": 3}
CHAT = {"model": "fake", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
JSON = [(b"content-type", b"application/json")]


def error_of(response, status: int) -> dict:
    """The OpenAI error object of a response, checked for its status and shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == status and body["error"]["message"]
    return body["error"]


def frames(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, `[DONE]` included."""
    parts = [part for part in text.split("\n\n") if part]
    assert all(part.startswith("data: ") for part in parts), parts
    return [part.removeprefix("data: ") for part in parts]


def test_completion_and_chat_answer_through_the_model_api(client: TestClient, engine: FakeEngine) -> None:
    completion = client.post("/v1/completions", json=COMPLETION)
    assert completion.status_code == 200
    assert completion.json()["choices"][0]["text"] == "Hello from the"
    assert completion.json()["usage"] == {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
    chat = client.post("/v1/chat/completions", json=CHAT)
    assert chat.json()["choices"][0]["message"] == {"role": "assistant", "content": "Hello from"}
    calls = engine.openai_serving.calls
    assert [call["adapter"] for call in calls] == [None, None]
    assert len({call["request_id"] for call in calls}) == 2


def test_streams_are_sse_frames_ending_with_done(client: TestClient) -> None:
    body = {**COMPLETION, "stream": True, "stream_options": {"include_usage": True}}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    payloads = frames(response.text)
    assert payloads[-1] == "[DONE]"
    texts = [json.loads(p)["choices"][0]["text"] for p in payloads[:-2]]
    assert texts == ["Hello", " from", " the"]
    assert json.loads(payloads[-2])["usage"]["completion_tokens"] == 3


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
    for name, version, adapters in (("alpha", "1", ["doc", "sql"]), ("alpha", "2", []), ("beta", "1", ["sql"])):
        engine_args = {"model": f"/weights/{name}", "enable_lora": True} if adapters else {"model": f"/weights/{name}"}
        version_dir = write_model(root, name, version, config="version_policy: { all { } }", **engine_args)
        if adapters:
            (version_dir / "multi_lora.json").write_text(json.dumps({a: f"adapters/{a}" for a in adapters}))
    return root


@pytest.fixture
def engines() -> dict[str, FakeEngine]:
    return {key: FakeEngine() for key in ("alpha/1", "alpha/2", "beta/1")}


@pytest.fixture
def lora_client(lora_repository: Path, engines: dict[str, FakeEngine]) -> TestClient:
    from app.main import create_app
    from app.settings import Settings

    app = create_app(Settings(model_repository=lora_repository), lambda spec: engines[f"{spec.name}/{spec.version}"])
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_models_list_versions_and_adapters(lora_client: TestClient, lora_repository: Path) -> None:
    cards = {card["id"]: card for card in lora_client.get("/v1/models").json()["data"]}
    assert set(cards) == {"alpha", "alpha/1", "alpha/2", "doc", "alpha/sql", "beta", "beta/sql"}
    assert cards["doc"]["parent"] == "alpha/1" and cards["alpha/sql"]["parent"] == "alpha/1"
    assert cards["beta/sql"]["parent"] == "beta"
    assert cards["doc"]["root"] == str(lora_repository / "alpha" / "1" / "adapters" / "doc")
    assert cards["alpha"]["root"] == "/weights/alpha" and cards["alpha"]["parent"] is None
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
    lora_client: TestClient, engines: dict[str, FakeEngine], model: str, engine: str, adapter: str | None
) -> None:
    response = lora_client.post("/v1/completions", json={**COMPLETION, "model": model})
    assert response.status_code == 200, response.text
    (call,) = engines[engine].openai_serving.calls
    assert call["adapter"] == adapter


@pytest.mark.parametrize("model", ["gamma", "alpha/3", "alpha/2/doc", "alpha/nope", "a/b/c/d"])
def test_unknown_model_ids_are_404(lora_client: TestClient, model: str) -> None:
    error = error_of(lora_client.post("/v1/chat/completions", json={**CHAT, "model": model}), 404)
    assert error["type"] == "NotFoundError" and error["param"] == "model" and model in error["message"]


def test_ambiguous_adapter_and_missing_model_name_the_field(lora_client: TestClient) -> None:
    error = error_of(lora_client.post("/v1/completions", json={**COMPLETION, "model": "sql"}), 400)
    assert error["param"] == "model" and "'alpha/sql'" in error["message"] and "'beta/sql'" in error["message"]
    body = {key: value for key, value in COMPLETION.items() if key != "model"}
    assert error_of(lora_client.post("/v1/completions", json=body), 400)["param"] == "model"


def test_a_single_model_may_be_left_unnamed(client: TestClient) -> None:
    body = {key: value for key, value in COMPLETION.items() if key != "model"}
    assert client.post("/v1/completions", json=body).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"not json", None),
        (b"[1, 2]", None),
        (b'{"model": "fake", "prompt": "x", "temperature": NaN}', None),
        (b'{"model": "fake", "prompt": "x", "max_tokens": Infinity}', None),
        (b"[" * 10000 + b"]" * 10000, None),
        (b'{"model": 5, "prompt": "x"}', "model"),
        (b'{"model": "fake", "prompt": "x", "max_tokens": "many"}', "max_tokens"),
        (b'{"model": "fake"}', "prompt"),
        (b'\xc3\x28', None),
    ],
)
def test_bad_bodies_are_400_in_openai_shape(client: TestClient, body: bytes, param: str | None) -> None:
    error = error_of(client.post("/v1/completions", content=body), 400)
    assert error["type"] == "BadRequestError" and error["param"] == param


def test_other_v1_paths_and_methods_answer_in_openai_shape_and_triton_routes_keep_theirs(client: TestClient) -> None:
    assert error_of(client.post("/v1/embeddings", json={}), 404)["type"] == "NotFoundError"
    assert error_of(client.get("/v1/completions"), 405)["type"] == "MethodNotAllowedError"
    triton = client.post("/v2/models/other/generate", json={"text_input": "x"})
    assert triton.status_code == 404 and set(triton.json()) == {"error"} and isinstance(triton.json()["error"], str)


def test_api_key_errors_in_openai_shape(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), api_keys="k1")
    error = error_of(client.post("/v1/completions", json=COMPLETION), 401)
    assert error["type"] == "UnauthorizedError" and "API key" in error["message"]
    assert error_of(client.get("/v1/models", headers={"Authorization": "Bearer k2"}), 401)
    ok = client.post("/v1/completions", json=COMPLETION, headers={"Authorization": "Bearer k1"})
    assert ok.status_code == 200
    assert client.post("/v2/models/fake/generate", json={"text_input": "x"}).json() == {
        "error": "missing or invalid API key: send `Authorization: Bearer <key>`"
    }


def test_body_size_limit_in_openai_shape(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), max_request_body_bytes=2048)
    error = error_of(client.post("/v1/completions", json={**COMPLETION, "prompt": "x" * 5000}), 413)
    assert "larger than 2048 bytes" in error["message"]


def test_overload_is_503_with_retry_after(make_client: Callable[..., TestClient]) -> None:
    engine = FakeEngine(step_delay=0.02)
    client = make_client(engine, max_pending_requests=1)
    thread, result = in_background(client, "/v1/completions", {**COMPLETION, "max_tokens": 30})
    wait_until(lambda: len(engine.active) == 1)
    for path, body in (("/v1/completions", COMPLETION), ("/v1/chat/completions", {**CHAT, "stream": True})):
        response = client.post(path, json=body)
        error = error_of(response, 503)
        assert response.headers["retry-after"] == "1" and "overloaded" in error["message"]
        assert error["type"] == "ServiceUnavailableError"
    thread.join()
    assert result["response"].status_code == 200


def test_unhealthy_engine_is_503(client: TestClient, engine: FakeEngine) -> None:
    engine.healthy = False
    assert "unhealthy" in error_of(client.post("/v1/chat/completions", json=CHAT), 503)["message"]


def test_server_limits_name_the_field(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), max_tokens_limit=5, max_n=2)
    error = error_of(client.post("/v1/completions", json={**COMPLETION, "max_tokens": 6}), 400)
    assert error == {"message": "max_tokens: 6 is above this server's limit of 5", "type": "BadRequestError",
                     "param": "max_tokens", "code": 400}
    assert error_of(client.post("/v1/chat/completions", json={**CHAT, "n": 3}), 400)["param"] == "n"


def test_timeout_is_504_or_an_error_frame_and_aborts(make_client: Callable[..., TestClient]) -> None:
    engine = FakeEngine(step_delay=0.05)
    client = make_client(engine, request_timeout_seconds=0.3)
    long = {**COMPLETION, "max_tokens": 1000}
    error = error_of(client.post("/v1/completions", json=long), 504)
    assert error["message"] == "Request timed out after 0.3 s and was aborted"
    payloads = frames(client.post("/v1/completions", json={**long, "stream": True}).text)
    assert payloads[-1] == "[DONE]"
    assert json.loads(payloads[-2])["error"]["code"] == 504
    assert json.loads(payloads[0])["choices"][0]["text"] == "Hello"
    assert not engine.active and len(engine.aborted) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_client_disconnect_aborts_the_engine_request(
    make_client: Callable[..., TestClient], stream: bool
) -> None:
    engine = FakeEngine(step_delay=0.05)
    app = make_client(engine).app
    body = json.dumps({**COMPLETION, "max_tokens": 1000, "stream": stream}).encode()
    sent = await call_and_disconnect(app, "POST", "/v1/completions", body=body, headers=JSON, seconds=0.3)
    assert await eventually(lambda: len(engine.aborted) == 1)
    assert not engine.active
    started = [m for m in sent if m["type"] == "http.response.start"]
    assert started[0]["status"] == (200 if stream else 499)


async def test_a_stream_starts_once_vllm_has_checked_the_request(make_client: Callable[..., TestClient]) -> None:
    """As `vllm serve` starts it: before the first token, not with it."""
    engine = FakeEngine(step_delay=1.0)
    body = json.dumps({**COMPLETION, "max_tokens": 3, "stream": True}).encode()
    sent = await call_and_disconnect(make_client(engine).app, "POST", "/v1/completions", body=body, headers=JSON, seconds=0.3)
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [200]
    assert not [m for m in sent if m.get("body", b"").startswith(b"data:")]
    assert await eventually(lambda: len(engine.aborted) == 1)


def test_requests_are_admitted_and_logged(
    make_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    engine = FakeEngine(step_delay=0.02)
    client = make_client(engine, log_prompts=True)
    served = client.app.state.runtime.registry.get("fake")
    thread, _ = in_background(client, "/v1/chat/completions", {**CHAT, "max_tokens": 10})
    wait_until(lambda: len(served.in_flight) == 1)
    thread.join()
    assert not served.in_flight
    (record,) = [r for r in caplog.records if r.name == "app.access" and r.access["path"] == "/v1/chat/completions"]
    fields = record.access
    assert (fields["model"], fields["version"], fields["status"]) == ("fake", "1", 200)
    assert fields["generated_tokens"] == 10 and fields["prompt_tokens"] == 1 and fields["ttft_ms"] > 0
    assert json.loads(fields["prompt"]) == CHAT["messages"]


def test_request_headers_reach_the_model_api(client: TestClient, engine: FakeEngine) -> None:
    client.post("/v1/completions", json=COMPLETION, headers={"X-Request-Id": "abc", "traceparent": "00-1-2-01"})
    headers = engine.openai_serving.calls[0]["headers"]
    assert headers["x-request-id"] == "abc" and headers["traceparent"] == "00-1-2-01"


def test_a_model_without_an_openai_api_is_not_listed_or_served(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(openai=False))
    assert client.get("/v1/models").json()["data"] == []
    assert error_of(client.post("/v1/completions", json=COMPLETION), 404)["param"] == "model"
    assert client.post("/v2/models/fake/generate", json={"text_input": "x"}).status_code == 200


def test_openapi_documents_the_v1_routes(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    operations = {(path, method): op for path, ops in schema["paths"].items() for method, op in ops.items()}
    for key in [("/v1/models", "get"), ("/v1/models/{model_id}", "get"), ("/v1/completions", "post"),
                ("/v1/chat/completions", "post")]:
        assert operations[key]["tags"] == ["openai"], key
    for path in ("/v1/completions", "/v1/chat/completions"):
        body = operations[(path, "post")]["requestBody"]["content"]["application/json"]
        assert body["examples"] and body["schema"]["$ref"].startswith("#/components/schemas/")
        assert set(operations[(path, "post")]["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert {"CompletionRequest", "ChatCompletionRequest", "OpenAIErrorResponse"} <= set(schema["components"]["schemas"])


async def test_drain_aborts_long_requests_with_an_error(repository: Path) -> None:
    from starlette.requests import Request

    from app.core.service import GenerationService
    from app.errors import ModelUnavailableError
    from app.openai.calls import COMPLETIONS, OpenAIContext, run
    from app.openai.models import resolve
    from app.repository.registry import LifecycleOptions, ModelRegistry

    engine = FakeEngine(step_delay=0.01)
    registry = ModelRegistry(repository, lambda spec: engine, options=LifecycleOptions(drain_timeout=0.2))
    await registry.start()
    context = OpenAIContext(Request({"type": "http", "headers": []}), GenerationService(), None)
    target = resolve(registry, "fake")

    async def answer(body: dict) -> list:
        try:
            return [item async for item in run(context, target, {**COMPLETION, **body}, COMPLETIONS)]
        except ModelUnavailableError as exc:
            return [exc]

    tasks = [asyncio.create_task(answer({"max_tokens": 2000, "stream": stream})) for stream in (False, True)]
    short = asyncio.create_task(answer({"max_tokens": 5}))
    await asyncio.sleep(0.05)
    await registry.drain()
    (plain,), streamed, (finished,) = [await task for task in tasks] + [await short]
    assert isinstance(plain, ModelUnavailableError) and "shutting down" in str(plain)
    assert streamed[-1] == "data: [DONE]\n\n"
    error = json.loads(streamed[-2].removeprefix("data: "))["error"]
    assert error["code"] == 503 and "shutting down" in error["message"]
    assert finished["choices"][0]["finish_reason"] == "length"
    assert not registry.get("fake").in_flight and len(engine.abort_calls) == 2
    await registry.shutdown()
