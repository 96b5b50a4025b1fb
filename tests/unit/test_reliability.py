"""Overload, limits, timeouts, drain, authentication and CORS (engine double)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.service import GenerationService
from app.core.types import InferenceEngine
from app.errors import ServerError
from app.http.errors import http_status
from app.repository.layout import ModelSpec
from app.repository.registry import LifecycleOptions, ModelRegistry
from app.repository.served_model import ServedModel
from app.schemas.generate import GenerateRequest
from app.triton.inputs import body_inputs
from app.triton.outputs import ResponseBuilder
from app.triton.request import StreamPolicy, triton_request
from tests.doubles import FakeEngine
from tests.support.repository import EXPLICIT_CONTROL, write_model
from tests.support.waiting import wait_until

SLOW = {"text_input": "x", "parameters": {"max_tokens": 40}}


def in_background(
    client: TestClient, path: str, body: dict[str, Any]
) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        result["response"] = client.post(path, json=body)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


class AnsweredError(Exception):
    """An error with the HTTP status the server answers it with."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


def test_overload_answers_503_with_retry_after_at_once(
    make_client: Callable[..., TestClient],
) -> None:
    """Refused while the running requests are held (not once one ends), and quickly."""
    engine = FakeEngine()
    client = make_client(engine, max_pending_requests=2)
    with engine.held():
        workers = [in_background(client, "/v2/models/fake/generate", SLOW) for _ in range(2)]
        wait_until(lambda: len(engine.active) == 2, timeout=30)
        started = time.monotonic()
        for route in ("generate", "generate_stream"):
            response = client.post(f"/v2/models/fake/{route}", json={"text_input": "x"})
            assert response.status_code == 503 and response.headers["retry-after"] == "1"
            assert "overloaded" in response.json()["error"]
        assert time.monotonic() - started < 5
        assert engine.hung, "refused only once the running requests went on"
    for thread, result in workers:
        thread.join()
        assert result["response"].status_code == 200
    assert client.post("/v2/models/fake/generate", json={"text_input": "x"}).status_code == 200


def test_body_size_limit_answers_413(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), max_request_body_bytes=2048)
    big = json.dumps({"text_input": "x" * 5000})
    response = client.post("/v2/models/fake/generate", content=big)
    assert response.status_code == 413 and "larger than 2048 bytes" in response.json()["error"]

    def chunks():  # no Content-Length: counted as it streams in
        for _ in range(5):
            yield b" " * 1000

    response = client.post("/v2/models/fake/generate", content=chunks())
    assert response.status_code == 413


def test_max_tokens_and_n_limits(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), max_tokens_limit=100, max_n=2)
    response = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "parameters": {"max_tokens": 101}}
    )
    assert response.status_code == 400
    assert (
        response.json()["error"] == "parameters.max_tokens: 101 is above this server's limit of 100"
    )
    response = client.post(
        "/v2/models/fake/generate",
        json={"text_input": "x", "parameters": {"n": 3, "temperature": 1}},
    )
    assert response.status_code == 400 and "parameters.n" in response.json()["error"]


def test_request_timeout_aborts_and_reports(make_client: Callable[..., TestClient]) -> None:
    engine = FakeEngine(step_delay=0.05)
    client = make_client(engine, request_timeout_seconds=0.3)
    response = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "parameters": {"max_tokens": 1000}}
    )
    assert response.status_code == 504
    assert response.json() == {"error": "Request timed out after 0.3 s and was aborted"}
    response = client.post(
        "/v2/models/fake/generate_stream",
        json={"text_input": "x", "parameters": {"max_tokens": 1000}},
    )
    last = json.loads(response.text.strip().split("\n\n")[-1].removeprefix("data: "))
    assert last == {"error": "Request timed out after 0.3 s and was aborted"}
    assert not engine.active and len(engine.aborted) == 2


async def test_drain_finishes_short_requests_and_aborts_long_ones(repository: Path) -> None:
    engine = FakeEngine(step_delay=0.01)
    registry = ModelRegistry(
        repository, lambda spec: engine, options=LifecycleOptions(drain_timeout=2.0)
    )
    await registry.start()
    model = registry.get("fake")

    async def run(max_tokens: int) -> object:
        """The /generate response for `max_tokens`, or the error as HTTP would answer it."""
        body = GenerateRequest.model_validate(
            {"text_input": "x", "parameters": {"max_tokens": max_tokens}}
        )
        request = triton_request(body_inputs(body), model, StreamPolicy(default=False))
        try:
            async for chunk in GenerationService().stream(model, request.request):
                return ResponseBuilder(request, model.name, model.version).build(chunk)
        except ServerError as exc:
            return AnsweredError(http_status(exc), exc.message)
        return None

    short, long = asyncio.create_task(run(10)), asyncio.create_task(run(2_000))
    await asyncio.sleep(0.05)
    drain = asyncio.create_task(registry.drain())
    await asyncio.sleep(0.01)
    assert not model.is_ready
    with pytest.raises(Exception, match="shutting down"):
        model.ensure_ready()
    await drain
    short_result, long_result = await short, await long
    assert isinstance(short_result, dict) and short_result["text_output"].startswith("x")
    assert getattr(long_result, "status_code", None) == 503
    assert str(long_result) == "Request aborted: the server is shutting down"
    assert not model.in_flight
    await registry.shutdown()


async def test_a_drain_refuses_new_requests_before_the_supervisors_have_stopped(
    repository: Path,
) -> None:
    """Readiness and admission turn together: a request that comes once readiness answers
    503 is refused, however long the engines' supervisors take to stop."""
    registry = ModelRegistry(repository, lambda spec: FakeEngine())
    await registry.start()
    model = registry.get("fake")
    supervisors_stopped = asyncio.Event()
    supervision = registry._supervision
    stop_supervisors = supervision.stop

    async def slow_stop(served_versions: Sequence[ServedModel]) -> None:
        await supervisors_stopped.wait()
        await stop_supervisors(served_versions)

    supervision.stop = slow_stop  # type: ignore[method-assign]
    drain = asyncio.create_task(registry.drain())
    await asyncio.sleep(0)
    assert registry.draining
    with pytest.raises(ServerError, match="shutting down") as refused:
        async with model.admit("late"):
            pass
    assert http_status(refused.value) == 503
    supervisors_stopped.set()
    await drain
    await registry.shutdown()


async def test_a_version_that_finishes_loading_during_a_drain_admits_nothing(
    repository: Path,
) -> None:
    """A reload whose new engines become ready while the server drains: the new version
    refuses requests too (the shutdown stops its engines), instead of serving unsupervised."""
    engines: list[FakeEngine] = []

    def factory(spec: ModelSpec) -> InferenceEngine:
        engines.append(FakeEngine(start_delay=0.3 if engines else 0.0))
        return engines[-1]

    registry = ModelRegistry(repository, factory)
    await registry.start()
    reload = asyncio.create_task(registry.load("fake"))
    await asyncio.sleep(0.05)
    await registry.drain()
    await reload
    assert len(engines) == 2 and engines[1].started
    with pytest.raises(ServerError, match="shutting down") as refused:
        async with registry.get("fake").admit("late"):
            pass
    assert http_status(refused.value) == 503
    await registry.shutdown()


async def test_a_drain_logs_when_its_running_requests_have_finished(
    repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = ModelRegistry(repository, lambda spec: FakeEngine())
    await registry.start()
    model = registry.get("fake")

    async def run() -> None:
        async with model.admit("running"):
            await asyncio.sleep(0.2)

    running = asyncio.create_task(run())
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.INFO, logger="app.repository.served_model"):
        await registry.drain()
    await running
    assert re.search(
        r"model 'fake' version 1: drained, its 1 running requests finished in \d+\.\d s",
        caplog.text,
    ), caplog.text
    await registry.shutdown()


def test_api_keys(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), api_keys="k1,k2")
    body = {"text_input": "x"}
    missing = client.post("/v2/models/fake/generate", json=body)
    assert missing.status_code == 401 and "API key" in missing.json()["error"]
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = client.post(
        "/v2/models/fake/generate", json=body, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401
    for key in ("k1", "k2"):
        ok = client.post(
            "/v2/models/fake/generate", json=body, headers={"Authorization": f"Bearer {key}"}
        )
        assert ok.status_code == 200
    assert client.get("/v2/models/fake").status_code == 401
    assert client.get("/v2/health/ready").status_code == 200
    assert client.get("/metrics").status_code == 200


def test_health_and_metrics_can_be_closed_too(make_client: Callable[..., TestClient]) -> None:
    client = make_client(
        FakeEngine(), api_keys=["k"], auth_open_health=False, auth_open_metrics=False
    )
    assert client.get("/v2/health/live").status_code == 401
    assert client.get("/metrics").status_code == 401
    assert client.get("/v2/health/live", headers={"Authorization": "Bearer k"}).status_code == 200


def test_cors_allow_list(make_client: Callable[..., TestClient]) -> None:
    client = make_client(FakeEngine(), cors_allow_origins="https://ui.example")
    preflight = {"Origin": "https://ui.example", "Access-Control-Request-Method": "POST"}
    allowed = client.options("/v2/models/fake/generate", headers=preflight)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://ui.example"
    other = client.options(
        "/v2/models/fake/generate", headers={**preflight, "Origin": "https://evil.example"}
    )
    assert "access-control-allow-origin" not in other.headers
    response = client.post(
        "/v2/models/fake/generate",
        json={"text_input": "x"},
        headers={"Origin": "https://ui.example"},
    )
    assert response.headers["access-control-allow-origin"] == "https://ui.example"


@pytest.mark.parametrize("name", ["../fake", "..", "fake/../../etc", "%2e%2e"])
def test_model_names_never_reach_the_file_system(
    make_client: Callable[..., TestClient], name: str
) -> None:
    client = make_client(FakeEngine(), **EXPLICIT_CONTROL)
    response = client.post(f"/v2/repository/models/{name}/load")
    assert response.status_code in (400, 404)
    assert set(response.json()) == {"error"}


@pytest.mark.parametrize(
    "parameter",
    [
        {"model": "other"},
        {"max_model_len": 10},
        {"enforce_eager": False},
        {"output_kind": 2},
        {"detokenize": False},
        {"extra_args": {"x": 1}},
    ],
)
def test_requests_cannot_set_engine_arguments(
    client: TestClient, parameter: dict[str, Any]
) -> None:
    response = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "parameters": parameter}
    )
    assert response.status_code == 400 and next(iter(parameter)) in response.json()["error"]


def test_lora_paths_come_only_from_the_repository(
    make_client: Callable[..., TestClient], tmp_path: Path
) -> None:
    root = tmp_path / "lora"
    version_dir = write_model(root, "fake", model="x", enable_lora=True)
    (version_dir / "multi_lora.json").write_text(json.dumps({"a": "adapters/a"}))
    engine = FakeEngine()
    client = make_client(engine, root)
    response = client.post(
        "/v2/models/fake/generate",
        json={"text_input": "x", "parameters": {"lora_name": "/etc/passwd"}},
    )
    assert response.status_code == 400 and "not supported" in response.json()["error"]
    assert (
        client.post(
            "/v2/models/fake/generate", json={"text_input": "x", "parameters": {"lora_name": "a"}}
        ).status_code
        == 200
    )
    assert engine.requests[-1].lora.path == version_dir / "adapters" / "a"
