"""Triton's gRPC inference RPCs with hostile messages (tests/fuzz/grpc_requests.py), over a
real channel to the server with the engine double: every ModelStreamInfer request gets its
responses or its error and a final response, no call or request ends INTERNAL or UNKNOWN, no
answer is slower than the bound while a readiness probe keeps answering, and no engine
request is left."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.fuzz.checks import stream_statuses
from tests.fuzz.double_server import double_server
from tests.fuzz.grpc_requests import model_infer_requests
from tests.fuzz.report import EXAMPLES, REPORT, SERVER_FAULTS, SLOW_SECONDS, requests_left
from tests.support.probe import readiness_probe
from tests.support.repository import write_model
from tests.support.waiting import wait_until

FINAL = "triton_final_response"
SETTINGS = {"max_tokens_limit": 4, "max_request_body_bytes": 1 << 20}
HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root: Path = tmp_path_factory.mktemp("grpc-fuzz") / "repo"
    write_model(root, "fake")
    with double_server(root, **SETTINGS) as urls:
        yield urls


@pytest.fixture(scope="module")
def stub(served: tuple[str, str]) -> Iterator[Any]:
    with grpc.insecure_channel(served[1]) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def test_model_stream_infer(served: tuple[str, str], stub: Any, fuzz_report: None) -> None:
    http_url, _ = served

    @given(request=model_infer_requests())
    @HYPOTHESIS
    def send(request: service_pb2.ModelInferRequest) -> None:
        started = time.perf_counter()
        responses = list(stub.ModelStreamInfer(iter([request]), timeout=60))
        refused = any(response.error_message for response in responses)
        REPORT.record(
            "gRPC ModelStreamInfer", "error" if refused else "OK", time.perf_counter() - started
        )
        assert responses, "every request gets a response"
        last = responses[-1]
        assert last.infer_response.parameters[FINAL].bool_param, last
        assert all(r.infer_response.id == request.id for r in responses)

    with readiness_probe(http_url) as probe:
        send()
    assert not probe.failures and probe.worst < SLOW_SECONDS, (probe.worst, probe.failures[:3])
    wait_until(lambda: requests_left(http_url) == 0, timeout=10)
    statuses = stream_statuses(http_url)
    assert not [key for key in statuses if key.rsplit(":", 1)[1] in SERVER_FAULTS], statuses


def test_model_infer(served: tuple[str, str], stub: Any, fuzz_report: None) -> None:
    """Triton refuses unary inference on the backend's (decoupled) models: always a client
    status, whatever the message holds."""
    http_url, _ = served

    @given(request=model_infer_requests())
    @HYPOTHESIS
    def send(request: service_pb2.ModelInferRequest) -> None:
        started = time.perf_counter()
        try:
            stub.ModelInfer(request, timeout=60)
            code = "OK"
        except grpc.RpcError as error:
            code = error.code().name
        REPORT.record("gRPC ModelInfer", code, time.perf_counter() - started)
        assert code in {"UNIMPLEMENTED", "NOT_FOUND", "INVALID_ARGUMENT", "UNAVAILABLE"}, code

    with readiness_probe(http_url) as probe:
        send()
    assert not probe.failures and probe.worst < SLOW_SECONDS, (probe.worst, probe.failures[:3])
    assert REPORT.count("gRPC ModelInfer") >= EXAMPLES
    assert REPORT.count("gRPC ModelStreamInfer") >= EXAMPLES
