"""Triton's gRPC inference RPCs with hostile messages (tests/fuzz/grpc_requests.py: edge
values and the families of tests/fuzz/families.py), over a real channel to the server with
the engine double: every ModelStreamInfer request gets its responses or its error (a lone
surrogate's always) and a final response, no call or request ends INTERNAL or UNKNOWN, no
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
from tritonclient.grpc import service_pb2_grpc

from tests.fuzz.checks import stream_infer, stream_statuses
from tests.fuzz.double_server import double_server
from tests.fuzz.families import FAMILIES
from tests.fuzz.grpc_requests import Draw, model_infer_requests
from tests.fuzz.report import (
    EXAMPLES,
    PROBE_SLOW_SECONDS,
    REPORT,
    SERVER_FAULTS,
    SLOW_SECONDS,
    requests_left,
)
from tests.support.probe import readiness_probe
from tests.support.repository import write_model
from tests.support.waiting import wait_until

MAX_MESSAGE_BYTES = 1 << 20
SETTINGS = {"max_tokens_limit": 4, "max_request_body_bytes": MAX_MESSAGE_BYTES}
"""(The largest gRPC message is the body limit too.)"""
REFUSALS = {"UNIMPLEMENTED", "NOT_FOUND", "INVALID_ARGUMENT", "UNAVAILABLE"}
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

    @given(draw=model_infer_requests())
    @HYPOTHESIS
    def send(draw: Draw) -> None:
        stream_infer(stub, draw, "gRPC ModelStreamInfer", SLOW_SECONDS, MAX_MESSAGE_BYTES)

    with readiness_probe(http_url) as probe:
        send()
    worst = probe.worst
    assert not probe.failures and worst < PROBE_SLOW_SECONDS, (worst, probe.failures[:3])
    wait_until(lambda: requests_left(http_url) == 0, timeout=10)
    statuses = stream_statuses(http_url)
    assert not [key for key in statuses if key.rsplit(":", 1)[1] in SERVER_FAULTS], statuses


def test_model_infer(served: tuple[str, str], stub: Any, fuzz_report: None) -> None:
    """Triton refuses unary inference on the backend's (decoupled) models: always a client
    status, whatever the message holds."""
    http_url, _ = served

    @given(draw=model_infer_requests())
    @HYPOTHESIS
    def send(draw: Draw) -> None:
        started = time.perf_counter()
        try:
            stub.ModelInfer(draw.message, timeout=60)
            code = "OK"
        except grpc.RpcError as error:
            code = error.code().name
        REPORT.record("gRPC ModelInfer", code, time.perf_counter() - started, family=draw.family)
        assert code in REFUSALS or (
            code == "RESOURCE_EXHAUSTED" and draw.message.ByteSize() > MAX_MESSAGE_BYTES
        ), code

    with readiness_probe(http_url) as probe:
        send()
    worst = probe.worst
    assert not probe.failures and worst < PROBE_SLOW_SECONDS, (worst, probe.failures[:3])
    assert REPORT.count("gRPC ModelInfer") >= EXAMPLES
    assert REPORT.count("gRPC ModelStreamInfer") >= EXAMPLES
    drawn = {
        (family, rpc): REPORT.count_of_family(family, f"gRPC {rpc}")
        for family in FAMILIES
        for rpc in ("ModelInfer", "ModelStreamInfer")
    }
    assert all(drawn.values()), [key for key, count in drawn.items() if not count]
