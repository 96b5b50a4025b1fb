"""The other RPCs of GRPCInferenceService with the engine double, through tritonclient:
health, metadata, config, repository, statistics, refusals, keys, drain, metrics, logs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import tritonclient.grpc as triton_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from app.grpc.server import GrpcOptions, GrpcServer
from app.main import build_runtime, create_grpc_server
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.asgi import free_port
from tests.support.repository import EXPLICIT_CONTROL, write_model
from tests.support.triton_grpc import (
    GrpcApp,
    by_id,
    serve_grpc_app,
    stream_results,
    text_of,
    vllm_request,
)
from tests.support.waiting import wait_until


@pytest.fixture
def two_models(tmp_path: Path) -> Path:
    root = tmp_path / "two"
    write_model(root, "fake", "1", config="version_policy: { all { } }")
    write_model(root, "fake", "2")
    write_model(root, "other", "1")
    return root


@pytest.fixture
def served(two_models: Path) -> Iterator[GrpcApp]:
    with serve_grpc_app(
        two_models, lambda spec: FakeEngine(), models=["fake"], **EXPLICIT_CONTROL
    ) as app:
        yield app


@pytest.fixture
def client(served: GrpcApp) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(served.grpc_url) as grpc_client:
        yield grpc_client


def status_of(call: Callable[..., object], *args: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as raised:
        call(*args, **kwargs)
    return raised.value.status(), raised.value.message()


def refused_stream(
    client: triton_grpc.InferenceServerClient, **stream_options: object
) -> InferenceServerException:
    """The error of a stream the server refuses as a whole (a request may not even get out)."""
    received: list[Any] = []
    client.start_stream(lambda result, error: received.append(error), **stream_options)
    with contextlib.suppress(InferenceServerException):
        client.async_stream_infer(**vllm_request("x", "1"))
    client.stop_stream()
    [error] = received
    return error


def test_health_and_readiness(client: triton_grpc.InferenceServerClient, served: GrpcApp) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("fake") and client.is_model_ready("fake", "1")
    assert not client.is_model_ready("other") and not client.is_model_ready("nope")
    assert not client.is_model_ready("fake", "7")
    with grpc.insecure_channel(served.grpc_url) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_server_and_model_metadata(client: triton_grpc.InferenceServerClient) -> None:
    server = client.get_server_metadata(as_json=True)
    assert server["extensions"] == [
        "model_repository",
        "model_configuration",
        "generate",
        "statistics",
        "trace",
        "logging",
    ]
    metadata = client.get_model_metadata("fake", as_json=True)
    assert metadata["versions"] == ["1", "2"] and metadata["platform"] == "vllm"
    assert {"name": "stream", "datatype": "BOOL", "shape": ["1"]} in metadata["inputs"]
    assert {"name": "num_input_tokens", "datatype": "UINT32", "shape": ["1"]} in metadata["outputs"]
    assert client.get_model_metadata("fake", "1", as_json=True)["versions"] == ["1"]
    assert status_of(client.get_model_metadata, "nope") == (
        "StatusCode.NOT_FOUND",
        "Request for unknown model: 'nope' is not found",
    )


def test_model_config_is_the_completed_config(client: triton_grpc.InferenceServerClient) -> None:
    config = client.get_model_config("fake").config
    assert (
        config.model_transaction_policy.decoupled
        and config.max_batch_size == 0
        and config.backend == "vllm"
    )
    inputs = {tensor.name: tensor.optional for tensor in config.input}
    assert inputs["text_input"] is False and inputs["sampling_parameters"] is True
    assert status_of(client.get_model_config, "fake", "9")[0] == "StatusCode.NOT_FOUND"


def test_repository_index_load_and_unload(client: triton_grpc.InferenceServerClient) -> None:
    index = {(m.name, m.version): m.state for m in client.get_model_repository_index().models}
    assert index == {("fake", "1"): "READY", ("fake", "2"): "READY", ("other", ""): ""}
    client.load_model("other")
    assert client.is_model_ready("other")
    client.unload_model("other")
    assert not client.is_model_ready("other")
    [entry] = [m for m in client.get_model_repository_index().models if m.name == "other"]
    assert (entry.state, entry.reason) == ("UNAVAILABLE", "unloaded")
    assert status_of(client.load_model, "missing")[0] == "StatusCode.INVALID_ARGUMENT"


def test_a_named_repository_is_unimplemented(served: GrpcApp) -> None:
    """Triton's answer to each repository call naming a repository; nothing is loaded."""
    requests = [
        ("RepositoryIndex", service_pb2.RepositoryIndexRequest(repository_name="r")),
        (
            "RepositoryModelLoad",
            service_pb2.RepositoryModelLoadRequest(repository_name="r", model_name="other"),
        ),
        (
            "RepositoryModelUnload",
            service_pb2.RepositoryModelUnloadRequest(repository_name="r", model_name="fake"),
        ),
    ]
    with grpc.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for method, request in requests:
            with pytest.raises(grpc.RpcError) as refused:
                getattr(stub, method)(request)
            assert (refused.value.code(), refused.value.details()) == (
                grpc.StatusCode.UNIMPLEMENTED,
                "'repository_name' specification is not supported",
            )
        ready = stub.ModelReady(service_pb2.ModelReadyRequest(name="fake")).ready
    assert ready


def test_load_takes_tritons_overrides(client: triton_grpc.InferenceServerClient) -> None:
    config = (
        '{"backend": "vllm", "parameters": {"REPORT_CUSTOM_METRICS": {"string_value": "true"}}}'
    )
    client.load_model("other", config=config)
    assert (
        client.get_model_config("other").config.parameters["REPORT_CUSTOM_METRICS"].string_value
        == "true"
    )
    files = {"file:1/model.json": b'{"model": "weights"}', "file:1/weights/config.json": b"{}"}
    client.load_model("other", config="{}", files=files)
    assert client.is_model_ready("other")
    code, message = status_of(client.load_model, "other", config="{nope")
    assert code == "StatusCode.INVALID_ARGUMENT" and message.startswith("Invalid config override")
    code, message = status_of(client.load_model, "other", files={"file:1/model.json": b"{}"})
    assert code == "StatusCode.INVALID_ARGUMENT" and "need the 'config' parameter" in message


def test_model_infer_on_the_decoupled_model_is_refused_as_triton_does(
    client: triton_grpc.InferenceServerClient,
) -> None:
    request = vllm_request("x")
    request.pop("parameters")
    assert status_of(client.infer, **request) == (
        "StatusCode.UNIMPLEMENTED",
        "ModelInfer RPC doesn't support models with decoupled transaction policy",
    )
    request["model_name"] = "nope"
    assert status_of(client.infer, **request)[0] == "StatusCode.NOT_FOUND"


@pytest.mark.parametrize(
    ("call", "feature"),
    [
        ("get_system_shared_memory_status", "system shared memory"),
        ("get_cuda_shared_memory_status", "CUDA shared memory"),
    ],
)
def test_shared_memory_is_unimplemented(
    client: triton_grpc.InferenceServerClient, call: str, feature: str
) -> None:
    assert status_of(getattr(client, call)) == (
        "StatusCode.UNIMPLEMENTED",
        f"{feature} is not supported by this server",
    )


def test_statistics_count_successes_and_failures(
    client: triton_grpc.InferenceServerClient, served: GrpcApp
) -> None:
    good = [vllm_request("x", str(i), sampling_parameters={"max_tokens": "2"}) for i in range(3)]
    failing = vllm_request("x", "bad", sampling_parameters={"max_tokens": "100000"})
    stream_results(client, [*good, failing])
    [stats] = client.get_inference_statistics("fake", "2").model_stats
    assert (stats.name, stats.version, stats.inference_count, stats.execution_count) == (
        "fake",
        "2",
        3,
        3,
    )
    inference = stats.inference_stats
    assert (inference.success.count, inference.fail.count, inference.queue.count) == (3, 1, 3)
    assert (
        inference.compute_infer.count == inference.compute_input.count == 3
        and inference.success.ns > 0
    )
    assert stats.last_inference > 0 and [b.batch_size for b in stats.batch_stats] == [1]
    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert [(s["name"], s["version"]) for s in everything] == [("fake", "1"), ("fake", "2")]
    http = httpx.get(f"{served.http_url}/v2/models/fake/versions/2/stats").json()["model_stats"][0]
    assert http["inference_stats"]["success"]["count"] == 3 and http["response_stats"] == {}
    assert status_of(client.get_inference_statistics, "other") == (
        "StatusCode.INVALID_ARGUMENT",
        "requested model 'other' is not available",
    )


def test_api_keys_in_metadata(two_models: Path) -> None:
    with (
        serve_grpc_app(
            two_models, lambda spec: FakeEngine(), models=["fake"], api_keys=["k1"]
        ) as app,
        triton_grpc.InferenceServerClient(app.grpc_url) as client,
    ):
        assert client.is_server_live() and client.is_server_ready()
        assert status_of(client.get_model_metadata, "fake") == (
            "StatusCode.UNAUTHENTICATED",
            "missing or invalid API key: send the metadata `authorization: Bearer <key>`",
        )
        assert status_of(client.is_model_ready, "fake", headers={"authorization": "Bearer wrong"})[
            0
        ] == ("StatusCode.UNAUTHENTICATED")
        assert client.is_model_ready("fake", headers={"authorization": "Bearer k1"})
        assert refused_stream(client).status() == "StatusCode.UNAUTHENTICATED"
        results = stream_results(
            client,
            [vllm_request("x", "1", sampling_parameters={"max_tokens": "1"})],
            headers={"authorization": "Bearer k1"},
        )
        assert text_of(by_id(results)["1"]) == "xHello"


def test_overload_is_the_http_text_per_request(tmp_path: Path) -> None:
    write_model(tmp_path / "repo", "fake")
    engine = FakeEngine()
    with (
        serve_grpc_app(tmp_path / "repo", lambda spec: engine, max_pending_requests=1) as app,
        triton_grpc.InferenceServerClient(app.grpc_url) as client,
    ):
        slow = vllm_request("x", "slow", sampling_parameters={"max_tokens": "6"})
        fast = vllm_request("x", "fast", sampling_parameters={"max_tokens": "1"})
        received: list[tuple[Any, Any]] = []
        client.start_stream(lambda result, error: received.append((result, error)))
        with engine.held():
            client.async_stream_infer(**slow)
            wait_until(lambda: len(engine.active) == 1, timeout=30)
            client.async_stream_infer(**fast)
            wait_until(lambda: any(error is not None for _, error in received), timeout=30)
            assert engine.hung, "refused only once the running request went on"
        client.stop_stream()
    errors = [error.message() for _, error in received if error is not None]
    assert errors == ["Model 'fake' is overloaded: 1 requests pending; retry later"]


def test_draining_server_opens_no_new_streams(
    client: triton_grpc.InferenceServerClient, served: GrpcApp
) -> None:
    served.runtime.registry.draining = True
    error = refused_stream(client)
    assert (error.status(), error.message()) == (
        "StatusCode.UNAVAILABLE",
        "GRPC server is shutting down and has stopped accepting new requests.",
    )
    assert client.is_server_live()


def test_metrics_and_access_log(
    client: triton_grpc.InferenceServerClient, served: GrpcApp, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    client.is_model_ready("fake")
    stream_results(
        client,
        [
            vllm_request("x", "ok", sampling_parameters={"max_tokens": "2"}),
            vllm_request("x", "no", model_name="nope"),
        ],
    )
    metrics = httpx.get(f"{served.http_url}/metrics").text
    service = 'grpc_service="inference.GRPCInferenceService"'
    assert (
        f'grpc_server_handled_total{{grpc_code="OK",grpc_method="ModelReady",{service}}} 1.0'
        in metrics
    )
    assert (
        f'grpc_server_handled_total{{grpc_code="OK",grpc_method="ModelStreamInfer",{service}}} 1.0'
        in metrics
    )
    streams = "grpc_server_stream_requests_total"
    assert f'{streams}{{grpc_code="OK",grpc_method="ModelStreamInfer",{service}}} 1.0' in metrics
    assert (
        f'{streams}{{grpc_code="NOT_FOUND",grpc_method="ModelStreamInfer",{service}}} 1.0'
        in metrics
    )
    lines = [r.getMessage() for r in caplog.records if r.name == "app.access"]
    assert any(
        "method=GRPC path=/inference.GRPCInferenceService/ModelReady status=0" in line
        for line in lines
    )
    [ok] = [line for line in lines if line.startswith("request_id=ok ")]
    assert "path=/inference.GRPCInferenceService/ModelStreamInfer status=0" in ok
    assert "model=fake version=2 prompt_tokens=1 generated_tokens=2" in ok
    assert any(line.startswith("request_id=no ") and "status=5" in line for line in lines)


def test_grpc_port_zero_disables_it(tmp_path: Path) -> None:
    settings = Settings(model_repository=[tmp_path], grpc_port=0)
    assert create_grpc_server(settings, build_runtime(settings, lambda spec: FakeEngine())) is None


async def test_a_taken_port_stops_start_up_unless_shared(tmp_path: Path) -> None:
    runtime = build_runtime(Settings(model_repository=[tmp_path]), lambda spec: FakeEngine())
    port = free_port()
    first = GrpcServer(runtime, GrpcOptions(host="127.0.0.1", port=port))
    await first.start()
    try:
        with pytest.raises(RuntimeError, match=f"gRPC: cannot listen on 127.0.0.1:{port}"):
            await GrpcServer(
                build_runtime(Settings(model_repository=[tmp_path]), lambda s: FakeEngine()),
                GrpcOptions(host="127.0.0.1", port=port),
            ).start()
    finally:
        await first.stop(0)
    shared = [
        GrpcServer(
            build_runtime(Settings(model_repository=[tmp_path]), lambda s: FakeEngine()),
            GrpcOptions(host="127.0.0.1", port=port, reuse_port=True),
        )
        for _ in range(2)
    ]
    for server in shared:
        await server.start()
    await asyncio.gather(*(server.stop(0) for server in shared))
