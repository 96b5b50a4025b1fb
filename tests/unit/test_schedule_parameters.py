"""Triton's schedule-policy parameters, `priority` and `timeout` (microseconds): its core reads
them from a request's parameters and never passes them to the backend. Here they become the
valid request's priority and deadline, on the HTTP body, the EventSource query and gRPC; a
value Triton refuses is a 400 (INVALID_ARGUMENT) with Triton's message or naming the field."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as triton_grpc
from fastapi.testclient import TestClient
from tritonclient.grpc import service_pb2

from app.errors import InvalidRequestError
from app.grpc.requests import read_request
from tests.doubles import FakeEngine
from tests.support.repository import write_model
from tests.support.triton_grpc import GrpcApp, serve_grpc_app, stream_results, vllm_request

TIMED_OUT = "Request timed out after 0.3 s and was aborted"
LONG = {"text_input": "x", "parameters": {"max_tokens": 1000}}


def with_parameters(body: dict[str, Any], **parameters: Any) -> dict[str, Any]:
    return {**body, "parameters": {**body["parameters"], **parameters}}


def test_a_client_timeout_sooner_than_the_servers_ends_the_request(
    make_client: Callable[..., TestClient],
) -> None:
    engine = FakeEngine(step_delay=0.05)
    client = make_client(engine, request_timeout_seconds=60)
    response = client.post("/v2/models/fake/generate", json=with_parameters(LONG, timeout=300_000))
    assert response.status_code == 504 and response.json() == {"error": TIMED_OUT}
    response = client.post(
        "/v2/models/fake/generate_stream", json=with_parameters(LONG, timeout=300_000)
    )
    last = json.loads(response.text.strip().split("\n\n")[-1].removeprefix("data: "))
    assert last == {"error": TIMED_OUT}
    assert not engine.active and len(engine.aborted) == 2


def test_the_servers_timeout_bounds_a_longer_client_timeout(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(FakeEngine(step_delay=0.05), request_timeout_seconds=0.3)
    response = client.post(
        "/v2/models/fake/generate", json=with_parameters(LONG, timeout=3_600_000_000)
    )
    assert response.status_code == 504 and response.json() == {"error": TIMED_OUT}


def test_timeout_zero_is_no_bound_and_priority_reaches_the_engine_not_sampling(
    make_client: Callable[..., TestClient],
) -> None:
    engine = FakeEngine()
    client = make_client(engine)
    body = {"text_input": "x", "parameters": {"max_tokens": 3, "timeout": 0, "priority": 2}}
    response = client.post("/v2/models/fake/generate", json=body)
    assert response.status_code == 200, response.text
    received = engine.requests[-1]
    assert received.priority == 2
    assert not hasattr(received.sampling_params, "priority")
    query = "text_input=x&max_tokens=2&priority=1&timeout=5000000"
    response = client.get(f"/v2/models/fake/generate_stream?{query}")
    assert response.status_code == 200 and "error" not in response.text
    assert engine.requests[-1].priority == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [("priority", -1), ("priority", "high"), ("timeout", 1.5), ("timeout", -3), ("timeout", 2**64)],
)
def test_values_triton_refuses_are_400s_naming_the_field(
    make_client: Callable[..., TestClient], name: str, value: Any
) -> None:
    engine = FakeEngine()
    client = make_client(engine)
    body = {"text_input": "x", "parameters": {"max_tokens": 2, name: value}}
    for route in ("generate", "generate_stream"):
        response = client.post(f"/v2/models/fake/{route}", json=body)
        assert response.status_code == 400
        assert response.json()["error"].startswith(f"parameters.{name}: "), response.text
    assert not engine.requests


def grpc_request(**parameters: service_pb2.InferParameter) -> service_pb2.ModelInferRequest:
    text = service_pb2.ModelInferRequest.InferInputTensor(
        name="text_input",
        datatype="BYTES",
        shape=[1],
        contents=service_pb2.InferTensorContents(bytes_contents=[b"x"]),
    )
    request = service_pb2.ModelInferRequest(model_name="fake", inputs=[text])
    for name, parameter in parameters.items():
        request.parameters[name].CopyFrom(parameter)
    return request


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"priority": service_pb2.InferParameter(string_param="high")},
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
        ),
        (
            {"priority": service_pb2.InferParameter(int64_param=-1)},
            "invalid value for 'priority', expected value >= 0.",
        ),
        (
            {"timeout": service_pb2.InferParameter(bool_param=True)},
            "invalid value type for 'timeout' parameter, expected int64_param.",
        ),
    ],
)
def test_grpc_checks_them_as_tritons_core_does(
    parameters: dict[str, service_pb2.InferParameter], message: str
) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        read_request(grpc_request(**parameters))
    assert raised.value.message == message


def test_grpc_reads_them_apart_from_the_sampling_parameters() -> None:
    request = grpc_request(
        priority=service_pb2.InferParameter(uint64_param=3),
        timeout=service_pb2.InferParameter(int64_param=250_000),
        temperature=service_pb2.InferParameter(double_param=0.5),
    )
    given = read_request(request)
    assert (given.schedule.priority, given.schedule.timeout_seconds) == (3, 0.25)
    assert given.parameters == {"temperature": 0.5}


@pytest.fixture
def slow_grpc(tmp_path: Path) -> Iterator[tuple[GrpcApp, FakeEngine]]:
    write_model(tmp_path / "repo", "fake")
    engine = FakeEngine(step_delay=0.05)
    with serve_grpc_app(tmp_path / "repo", lambda spec: engine) as app:
        yield app, engine


def test_a_grpc_stream_request_ends_at_its_timeout(
    slow_grpc: tuple[GrpcApp, FakeEngine],
) -> None:
    app, engine = slow_grpc
    long = vllm_request("x", "long", stream=True, sampling_parameters={"max_tokens": 1000})
    short = vllm_request("x", "short", sampling_parameters={"max_tokens": 2})
    with triton_grpc.InferenceServerClient(app.grpc_url) as client:
        results = stream_results(client, [{**long, "timeout": 300_000}, {**short, "priority": 1}])
    errors = [error.message() for result, error in results if error is not None]
    assert errors == [TIMED_OUT]
    assert [request.priority for request in engine.requests] == [0, 1]
    assert not engine.active
