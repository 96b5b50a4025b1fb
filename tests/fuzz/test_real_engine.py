"""The real engine behind the inference routes (the session's limited server, shared with the
limit tests: the default model, as this CPU runs it, MAX_TOKENS_LIMIT=2): well-typed edge
values and grammars, and the families that once stalled or killed the server (long strings
in lists, huge grammars, lone surrogates: tests/fuzz/families.py), reach vLLM's own checks,
its grammar compilers and the engine, on Triton HTTP, OpenAI and gRPC, with schemathesis's
cases of vLLM's own request schemas on top. No 5xx, INTERNAL or UNKNOWN; a lone surrogate is
a 400; a body sent streamed and not gets answers of the same kind; no answer slower than the
bound while a readiness probe keeps answering; no engine request left after each phase.
`FUZZ_ENGINE_EXAMPLES` inputs per route (default: FUZZ_EXAMPLES / 25, 40)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from tritonclient.grpc import service_pb2_grpc

from app.settings_fields import SettingsFields
from tests.fuzz.bodies import ROUTES, Request, once_broke_the_server, requests_of
from tests.fuzz.checks import (
    content_type,
    error_shape_holds,
    responses_stream_problem,
    send_for_missing,
    send_with_twin,
    stream_infer,
    stream_statuses,
    without_binary,
)
from tests.fuzz.families import FAMILIES
from tests.fuzz.grpc_requests import Draw, model_infer_requests
from tests.fuzz.mixing import RESPONSES
from tests.fuzz.report import ENGINE_SLOW_SECONDS, EXAMPLES, REPORT, SLOW_SECONDS, requests_left
from tests.fuzz.responses_bodies import OVER_LIMIT, stored_responses
from tests.fuzz.strategies import misfit_or_fitting
from tests.support.probe import readiness_probe
from tests.support.servers import RunningServer, tracebacks_of_ours
from tests.support.waiting import wait_until

T = TypeVar("T")
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
GRPC_ROUTE = "engine gRPC ModelStreamInfer"
MAX_MESSAGE_BYTES = SettingsFields.model_fields["max_request_body_bytes"].default
"""The server's largest gRPC message (its body limit, by default)."""
GRAMMAR_DEADLINE_S = SettingsFields.model_fields["grammar_compile_timeout_seconds"].default
"""GRAMMAR_COMPILE_TIMEOUT_SECONDS: a grammar whose compile takes longer is a 400 by then (and
its worker replaced), so huge grammars and counted repetitions (tests/fuzz/families.py) are
drawn here as on the double, each answered well within ENGINE_SLOW_SECONDS."""
assert GRAMMAR_DEADLINE_S * 3 < ENGINE_SLOW_SECONDS
GENERATING = [
    ("POST", "/v2/models/{model_name}/generate"),
    ("POST", "/v2/models/{model_name}/generate_stream"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/responses"),
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

    def send(request: Request) -> None:
        send_with_twin(
            session, engine_server.base_url, request, "engine HTTP ", ENGINE_SLOW_SECONDS
        )

    with readiness_probe(engine_server.base_url) as probe:
        every_family(f"engine HTTP {route}", lambda only: requests_of(route, MODEL, only), send)
    phase_ended_cleanly(engine_server, probe)


def families_of(route: str) -> tuple[str, ...]:
    """The families every route draws, and the route's own (`route` as the report counts
    it)."""
    return (*FAMILIES, OVER_LIMIT) if route == f"engine HTTP {RESPONSES}" else FAMILIES


def every_family(
    route: str, strategy: Callable[[str | None], st.SearchStrategy[T]], send: Callable[[T], None]
) -> None:
    """ENGINE_EXAMPLES inputs of `strategy(None)` to `send`, then two of each family that
    none of them was (so few inputs may miss one)."""
    drawn(strategy(None), send, ENGINE_EXAMPLES)
    for family in families_of(route):
        if not REPORT.count_of_family(family, route):
            drawn(strategy(family), send, 2)


def drawn(strategy: st.SearchStrategy[T], send: Callable[[T], None], examples: int) -> None:
    @given(strategy)
    @settings(HYPOTHESIS, max_examples=examples)
    def each(value: T) -> None:
        send(value)

    each()


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
    fitting, misfit = (
        operation.as_strategy(generation_mode=mode, path_parameters=named)
        for mode in map(GenerationMode, ("positive", "negative"))
    )
    cases = st.one_of(fitting, misfit_or_fitting(misfit, fitting))
    session = requests.Session()

    @given(case=cases)
    @settings(HYPOTHESIS, max_examples=max(ENGINE_EXAMPLES // 2, 10))
    def send(case: Any) -> None:
        if isinstance(case.body, dict):
            with_a_prompt(path, case.body)
        started = time.perf_counter()
        response = case.call(base_url=engine_server.base_url, session=session, timeout=60)
        REPORT.record(
            f"engine HTTP {method} {path} (schemathesis)",
            response.status_code,
            time.perf_counter() - started,
            ENGINE_SLOW_SECONDS,
        )
        assert error_shape_holds(path, response), (response.status_code, response.text[:300])
        if path == "/v1/responses" and "text/event-stream" in content_type(response):
            assert responses_stream_problem(response.text) is None, response.text[-600:]

    with readiness_probe(engine_server.base_url) as probe:
        send()
    phase_ended_cleanly(engine_server, probe)


def with_a_prompt(path: str, body: dict[str, Any]) -> None:
    """The served model in a body that names one, and a prompt in a completions body that
    has none (vLLM's schema leaves `prompt` optional, so most drawn bodies would be refused
    for the want of one before vLLM renders anything they hold)."""
    if "model" in body:
        body["model"] = MODEL
    if path == "/v1/completions" and body.get("prompt") is None:
        body["prompt"] = "Hi"


def test_stored_response_routes_are_404(engine_server: RunningServer, fuzz_report: None) -> None:
    """GET and cancel of a response, whatever its id: a 404 naming `response_id`."""
    session = requests.Session()

    def send(request: Request) -> None:
        send_for_missing(session, engine_server.base_url, request, "engine HTTP ", SLOW_SECONDS)

    drawn(stored_responses(), send, 10)


def test_grpc_model_stream_infer(engine_server: RunningServer, fuzz_report: None) -> None:
    with grpc.insecure_channel(engine_server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        def send(draw: Draw) -> None:
            stream_infer(stub, draw, GRPC_ROUTE, ENGINE_SLOW_SECONDS, MAX_MESSAGE_BYTES)

        with readiness_probe(engine_server.base_url) as probe:
            every_family(GRPC_ROUTE, lambda only: model_infer_requests(MODEL, only), send)
    phase_ended_cleanly(engine_server, probe)
    statuses = stream_statuses(engine_server.base_url)
    assert not [key for key in statuses if key.rsplit(":", 1)[1] in {"INTERNAL", "UNKNOWN"}], (
        statuses
    )


def test_requests_that_once_broke_the_server(
    engine_server: RunningServer, fuzz_report: None
) -> None:
    session = requests.Session()
    with readiness_probe(engine_server.base_url) as probe:
        for request in once_broke_the_server(MODEL):
            send_with_twin(
                session, engine_server.base_url, request, "engine HTTP ", ENGINE_SLOW_SECONDS
            )
    phase_ended_cleanly(engine_server, probe)


def test_every_family_reached_every_route() -> None:
    """Each family was drawn on each route (and the twins' answers matched)."""
    routes = [f"engine HTTP {route}" for route in ROUTES] + [GRPC_ROUTE]
    drawn = {
        (family, route): REPORT.count_of_family(family, route)
        for route in routes
        for family in families_of(route)
    }
    assert all(drawn.values()), [key for key, count in drawn.items() if not count]
    assert REPORT.pairs and not REPORT.mismatches, REPORT.mismatches
