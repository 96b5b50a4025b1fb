"""The OpenAI frontend's errors, in OpenAI's shape (including the middleware's): bad bodies,
unknown paths, API keys, the body size limit, overload, an unhealthy engine, the server's
limits, timeouts, client disconnects and a drain (each aborting the engine request)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.doubles import FakeEngine
from tests.support.asgi import call_and_disconnect
from tests.support.openai_routes import CHAT, COMPLETION, JSON, error_of, frames
from tests.support.waiting import eventually, wait_until
from tests.unit.test_reliability import in_background


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
        (b"\xc3\x28", None),
    ],
)
def test_bad_bodies_are_400_in_openai_shape(
    client: TestClient, body: bytes, param: str | None
) -> None:
    error = error_of(client.post("/v1/completions", content=body), 400)
    assert error["type"] == "BadRequestError" and error["param"] == param


def test_other_v1_paths_and_methods_answer_in_openai_shape_and_triton_routes_keep_theirs(
    client: TestClient,
) -> None:
    assert error_of(client.post("/v1/embeddings", json={}), 404)["type"] == "NotFoundError"
    assert error_of(client.get("/v1/completions"), 405)["type"] == "MethodNotAllowedError"
    triton = client.post("/v2/models/other/generate", json={"text_input": "x"})
    assert (
        triton.status_code == 404
        and set(triton.json()) == {"error"}
        and isinstance(triton.json()["error"], str)
    )


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
    engine = FakeEngine()
    client = make_client(engine, max_pending_requests=1)
    with engine.held():
        thread, result = in_background(client, "/v1/completions", {**COMPLETION, "max_tokens": 30})
        wait_until(lambda: len(engine.active) == 1, timeout=30)
        for path, body in (
            ("/v1/completions", COMPLETION),
            ("/v1/chat/completions", {**CHAT, "stream": True}),
        ):
            response = client.post(path, json=body)
            error = error_of(response, 503)
            assert response.headers["retry-after"] == "1" and "overloaded" in error["message"]
            assert error["type"] == "ServiceUnavailableError"
        assert engine.hung, "refused only once the running request went on"
    thread.join()
    assert result["response"].status_code == 200


def test_unhealthy_engine_is_503(client: TestClient, engine: FakeEngine) -> None:
    engine.healthy = False
    assert "unhealthy" in error_of(client.post("/v1/chat/completions", json=CHAT), 503)["message"]


def test_server_limits_name_the_field(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), max_tokens_limit=5, max_n=2)
    error = error_of(client.post("/v1/completions", json={**COMPLETION, "max_tokens": 6}), 400)
    assert error == {
        "message": "max_tokens: 6 is above this server's limit of 5",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }
    assert error_of(client.post("/v1/chat/completions", json={**CHAT, "n": 3}), 400)["param"] == "n"


def test_timeout_is_504_or_an_error_frame_and_aborts(
    make_client: Callable[..., TestClient],
) -> None:
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
    sent = await call_and_disconnect(
        app, "POST", "/v1/completions", body=body, headers=JSON, seconds=0.3
    )
    assert await eventually(lambda: len(engine.aborted) == 1)
    assert not engine.active
    started = [m for m in sent if m["type"] == "http.response.start"]
    assert started[0]["status"] == (200 if stream else 499)


async def test_a_stream_starts_once_vllm_has_checked_the_request(
    make_client: Callable[..., TestClient],
) -> None:
    """As `vllm serve` starts it: before the first token, not with it."""
    engine = FakeEngine(step_delay=1.0)
    body = json.dumps({**COMPLETION, "max_tokens": 3, "stream": True}).encode()
    sent = await call_and_disconnect(
        make_client(engine).app, "POST", "/v1/completions", body=body, headers=JSON, seconds=0.3
    )
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [200]
    assert not [m for m in sent if m.get("body", b"").startswith(b"data:")]
    assert await eventually(lambda: len(engine.aborted) == 1)


async def test_drain_aborts_long_requests_with_an_error(repository: Path) -> None:
    from starlette.requests import Request

    from app.core.service import GenerationService
    from app.errors import ModelUnavailableError
    from app.openai.generation import OpenAIContext, run
    from app.openai.models import resolve
    from app.repository.registry import LifecycleOptions, ModelRegistry
    from app.schemas.openai import OpenAIEndpoint

    engine = FakeEngine(step_delay=0.01)
    registry = ModelRegistry(
        repository, lambda spec: engine, options=LifecycleOptions(drain_timeout=2.0)
    )
    await registry.start()
    context = OpenAIContext(Request({"type": "http", "headers": []}), GenerationService(), None)
    target = resolve(registry, "fake")

    async def answer(body: dict[str, Any]) -> list[Any]:
        try:
            return [
                item
                async for item in run(
                    context, target, {**COMPLETION, **body}, OpenAIEndpoint.COMPLETIONS
                )
            ]
        except ModelUnavailableError as exc:
            return [exc]

    tasks = [
        asyncio.create_task(answer({"max_tokens": 2000, "stream": stream}))
        for stream in (False, True)
    ]
    short = asyncio.create_task(answer({"max_tokens": 5}))
    await asyncio.sleep(0.05)
    await registry.drain()
    (plain,), streamed, (finished,) = [await task for task in tasks] + [await short]
    assert isinstance(plain, ModelUnavailableError) and "shutting down" in str(plain)
    assert streamed[-1] == "data: [DONE]\n\n"
    error = json.loads(streamed[-2].removeprefix("data: "))["error"]
    assert error["code"] == 503 and "shutting down" in error["message"]
    assert json.loads(finished)["choices"][0]["finish_reason"] == "length"
    assert not registry.get("fake").in_flight and len(engine.abort_calls) == 2
    await registry.shutdown()
