"""Admission at the door: by default a model admits what its engine can hold (twice what it
runs at once); the rest is refused before any output, 503 with Retry-After over HTTP and
OpenAI, the same error on a gRPC stream; MAX_PENDING_REQUESTS overrides it (0: no limit)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tritonclient.grpc as triton_grpc
from fastapi.testclient import TestClient

from app.engine.capacity import admission_capacity
from tests.doubles import FakeEngine
from tests.support.repository import write_model
from tests.support.triton_grpc import serve_grpc_app, vllm_request
from tests.support.waiting import wait_until

LONG = {"text_input": "x", "parameters": {"max_tokens": 30}}
OPENAI = {"model": "fake", "prompt": "x", "max_tokens": 30, "stream": True}


def engine_holding(capacity: int | None) -> FakeEngine:
    engine = FakeEngine()
    engine.request_capacity = capacity
    return engine


def busy(client: TestClient, engine: FakeEngine, count: int) -> list[threading.Thread]:
    """`count` requests running in threads, once the engine holds them all (call it inside
    `engine.held()`, which keeps them running)."""
    threads = [
        threading.Thread(
            target=client.post, args=("/v2/models/fake/generate",), kwargs={"json": LONG}
        )
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(engine.active) == count, timeout=30)
    return threads


def test_requests_beyond_the_engines_capacity_are_refused_before_any_output(
    make_client: Callable[..., TestClient],
) -> None:
    engine = engine_holding(2)
    client = make_client(engine)
    with engine.held():
        threads = busy(client, engine, 2)
        triton = client.post("/v2/models/fake/generate_stream", json=LONG)
        assert triton.status_code == 503 and triton.headers["retry-after"] == "1"
        assert triton.json() == {
            "error": "Model 'fake' is overloaded: 2 requests pending; retry later"
        }
        openai = client.post("/v1/completions", json=OPENAI)
        assert openai.status_code == 503 and openai.headers["retry-after"] == "1"
        assert openai.json()["error"]["type"] == "ServiceUnavailableError"
        assert engine.hung, "refused only once the running requests went on"
    for thread in threads:
        thread.join()
    assert client.post("/v2/models/fake/generate_stream", json=LONG).status_code == 200


@pytest.mark.parametrize(("setting", "admitted"), [(1, 1), (3, 3)])
def test_max_pending_requests_overrides_the_engines_capacity(
    make_client: Callable[..., TestClient], setting: int, admitted: int
) -> None:
    engine = engine_holding(2)
    client = make_client(engine, max_pending_requests=setting)
    with engine.held():
        threads = busy(client, engine, admitted)
        assert client.post("/v2/models/fake/generate", json=LONG).status_code == 503
        assert engine.hung, "refused only once the running requests went on"
    for thread in threads:
        thread.join()


def test_max_pending_requests_zero_admits_everything(
    make_client: Callable[..., TestClient],
) -> None:
    engine = engine_holding(1)
    client = make_client(engine, max_pending_requests=0)
    with engine.held():
        threads = busy(client, engine, 3)
    for thread in threads:
        thread.join()


def test_a_grpc_stream_refuses_with_the_overload_error_before_any_response(tmp_path: Path) -> None:
    write_model(tmp_path / "repo", "fake")
    engine = engine_holding(1)
    with (
        serve_grpc_app(tmp_path / "repo", lambda spec: engine) as app,
        triton_grpc.InferenceServerClient(app.grpc_url) as client,
    ):
        received: list[tuple[Any, Any]] = []
        client.start_stream(lambda result, error: received.append((result, error)))
        with engine.held():
            client.async_stream_infer(
                **vllm_request("x", "slow", stream=True, sampling_parameters={"max_tokens": "20"})
            )
            wait_until(lambda: len(engine.active) == 1, timeout=30)
            client.async_stream_infer(
                **vllm_request("x", "refused", stream=True, sampling_parameters={"max_tokens": "1"})
            )
            wait_until(lambda: any(error is not None for _, error in received), timeout=30)
            assert engine.hung, "refused only once the running request went on"
        client.stop_stream()
    refused = [error.message() for _, error in received if error is not None]
    assert refused == ["Model 'fake' is overloaded: 1 requests pending; retry later"]
    answered = [result.get_response().id for result, error in received if error is None]
    assert set(answered) == {"slow"}


def vllm_config(max_num_seqs: int, num_gpu_blocks: int | None) -> SimpleNamespace:
    return SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs),
        cache_config=SimpleNamespace(num_gpu_blocks=num_gpu_blocks),
    )


@pytest.mark.parametrize(
    ("seqs", "blocks", "clients", "capacity"),
    [
        (128, 364, 1, 256),
        (128, None, 1, 256),
        (128, 40, 1, 80),
        (256, 10_000, 4, 128),
        (1, 1, 8, 1),
    ],
)
def test_capacity_is_twice_what_the_engine_runs_at_once(
    seqs: int, blocks: int | None, clients: int, capacity: int
) -> None:
    assert admission_capacity(vllm_config(seqs, blocks), clients) == capacity
