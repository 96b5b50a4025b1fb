"""The real engine behind the inference routes (the session's limited server, shared with the
limit tests: the default model, as this CPU runs it, MAX_TOKENS_LIMIT=2): well-typed edge
values and grammars reach vLLM's own checks, its grammar compilers and the engine, on Triton
HTTP, OpenAI and gRPC, with schemathesis's cases of vLLM's own request schemas on top. No 5xx,
INTERNAL or UNKNOWN; no answer slower than the bound while a readiness probe keeps answering;
no engine request left after each phase. `FUZZ_ENGINE_EXAMPLES` inputs per route (default:
FUZZ_EXAMPLES / 25, 40)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.fuzz.bodies import ROUTES, Request, requests_of
from tests.fuzz.checks import error_shape_holds, stream_statuses, without_binary
from tests.fuzz.grpc_requests import model_infer_requests
from tests.fuzz.report import ENGINE_SLOW_SECONDS, EXAMPLES, REPORT, SLOW_SECONDS, requests_left
from tests.support.probe import readiness_probe
from tests.support.servers import RunningServer, tracebacks_of_ours
from tests.support.waiting import wait_until

MODEL = "smollm2"
ENGINE_EXAMPLES = int(os.environ.get("FUZZ_ENGINE_EXAMPLES", str(max(EXAMPLES // 25, 20))))
HYPOTHESIS = settings(
    max_examples=ENGINE_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
GENERATING = [
    ("POST", "/v2/models/{model_name}/generate"),
    ("POST", "/v2/models/{model_name}/generate_stream"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
]


@pytest.fixture(scope="module")
def engine_server(limited_server: RunningServer) -> Iterator[RunningServer]:
    yield limited_server
    assert not tracebacks_of_ours(limited_server), limited_server.log_tail(80)


def phase_ended_cleanly(server: RunningServer, probe: Any) -> None:
    assert not probe.failures and probe.worst < SLOW_SECONDS, (probe.worst, probe.failures[:3])
    wait_until(lambda: requests_left(server.base_url) == 0, timeout=30)


@pytest.mark.parametrize("route", ROUTES)
def test_edge_values_and_grammars(
    route: str, engine_server: RunningServer, fuzz_report: None
) -> None:
    session = requests.Session()

    @given(request=requests_of(route, MODEL))
    @HYPOTHESIS
    def send(request: Request) -> None:
        name, method, path, arguments = request
        started = time.perf_counter()
        response = session.request(method, engine_server.base_url + path, timeout=60, **arguments)
        REPORT.record(
            f"engine HTTP {name}",
            response.status_code,
            time.perf_counter() - started,
            ENGINE_SLOW_SECONDS,
        )
        assert error_shape_holds(path, response), (response.status_code, response.text[:300])

    with readiness_probe(engine_server.base_url) as probe:
        send()
    phase_ended_cleanly(engine_server, probe)


@pytest.mark.parametrize(("method", "path"), GENERATING, ids=[f"{m} {p}" for m, p in GENERATING])
def test_schemathesis(
    method: str, path: str, engine_server: RunningServer, fuzz_report: None
) -> None:
    """vLLM's own request schemas (and the Triton ones), positive and negative cases."""
    document = requests.get(f"{engine_server.base_url}/openapi.json", timeout=60).json()
    operation = schemathesis.openapi.from_dict(without_binary(document))[path][method]
    named = {"model_name": MODEL} if "{model_name}" in path else {}
    # The modes by value: GenerationMode is a StrEnum (Python 3.11), so mypy, which checks for
    # Python 3.10, takes its members for plain strings
    cases = st.one_of(
        [
            operation.as_strategy(generation_mode=mode, path_parameters=named)
            for mode in map(GenerationMode, ("positive", "negative"))
        ]
    )
    session = requests.Session()

    @given(case=cases)
    @settings(HYPOTHESIS, max_examples=max(ENGINE_EXAMPLES // 2, 10))
    def send(case: Any) -> None:
        if isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = MODEL
        started = time.perf_counter()
        response = case.call(base_url=engine_server.base_url, session=session, timeout=60)
        REPORT.record(
            f"engine HTTP {method} {path} (schemathesis)",
            response.status_code,
            time.perf_counter() - started,
            ENGINE_SLOW_SECONDS,
        )
        assert error_shape_holds(path, response), (response.status_code, response.text[:300])

    with readiness_probe(engine_server.base_url) as probe:
        send()
    phase_ended_cleanly(engine_server, probe)


def test_grpc_model_stream_infer(engine_server: RunningServer, fuzz_report: None) -> None:
    with grpc.insecure_channel(engine_server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        @given(request=model_infer_requests(MODEL))
        @HYPOTHESIS
        def send(request: service_pb2.ModelInferRequest) -> None:
            started = time.perf_counter()
            responses = list(stub.ModelStreamInfer(iter([request]), timeout=60))
            refused = any(response.error_message for response in responses)
            REPORT.record(
                "engine gRPC ModelStreamInfer",
                "error" if refused else "OK",
                time.perf_counter() - started,
                ENGINE_SLOW_SECONDS,
            )
            assert (
                responses
                and responses[-1].infer_response.parameters["triton_final_response"].bool_param
            )

        with readiness_probe(engine_server.base_url) as probe:
            send()
    phase_ended_cleanly(engine_server, probe)
    statuses = stream_statuses(engine_server.base_url)
    assert not [key for key in statuses if key.rsplit(":", 1)[1] in {"INTERNAL", "UNKNOWN"}], (
        statuses
    )
