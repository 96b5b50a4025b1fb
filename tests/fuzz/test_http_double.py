"""Every HTTP operation of the OpenAPI document (/v2, /v1 and the rest), with data that fits
its schema and data that does not, over real sockets to the server with the engine double:
no 5xx, every error in its protocol's shape, no answer slower than the bound while a
readiness probe keeps answering, no engine request left after each operation's phase.
(tests/fuzz/test_real_engine.py sends the generating routes' inputs to the real engine.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.doubles import FakeEngine
from tests.fuzz.bodies import INFERENCE_ROUTES, Request, requests_of
from tests.fuzz.checks import (
    content_type,
    error_shape_holds,
    responses_stream_problem,
    send_for_missing,
    send_with_twin,
    without_binary,
)
from tests.fuzz.double_server import double_server
from tests.fuzz.families import FAMILIES
from tests.fuzz.mixing import RESPONSES
from tests.fuzz.report import (
    EXAMPLES,
    PROBE_SLOW_SECONDS,
    REPORT,
    SLOW_SECONDS,
    requests_left,
)
from tests.fuzz.responses_bodies import OVER_LIMIT, stored_responses
from tests.fuzz.strategies import misfit_or_fitting
from tests.support.probe import readiness_probe
from tests.support.repository import write_model
from tests.support.waiting import wait_until

PROBE_LIMIT_S = PROBE_SLOW_SECONDS
INFERENCE = frozenset(INFERENCE_ROUTES)
"""The routes that take inference requests: FUZZ_EXAMPLES inputs each."""
PINNED = {"model_name": "fake", "model_version": "1"}
CONFORMANCE = [response_schema_conformance, content_type_conformance]
"""Answers match the document (status, content type, body schema)."""
DOCUMENTED = {
    "POST /v2/models/{model_name}/infer": 501,
    "POST /v2/models/{model_name}/versions/{model_version}/infer": 501,
}
"""Server errors Triton itself answers: 501 to `infer` on a decoupled model (every model of
its vLLM backend is)."""
CLIENT_DEADLINE_STATUS = 504
"""The answer to a request that ran past the `timeout` it asked for (Triton's parameter):
the client's choice, not a server error."""
SETTINGS = {
    "model_control_mode": "explicit",
    "load_model": ["*"],
    "max_tokens_limit": 4,
    "max_request_body_bytes": 1 << 20,
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The HTTP base URL of the server with the engine double (a process of its own)."""
    root: Path = tmp_path_factory.mktemp("fuzz") / "repo"
    write_model(root, "fake")
    with double_server(root, **SETTINGS) as (http_url, _):
        yield http_url


@pytest.fixture(scope="module")
def schema(served: str) -> Any:
    """The server's document, as served (bodies are JSON: `format: binary` strings, which
    schemathesis cannot mutate, are plain strings there)."""
    document = requests.get(f"{served}/openapi.json", timeout=30).json()
    return schemathesis.openapi.from_dict(without_binary(document))


def operation_names() -> list[str]:
    """The document's operations, read once from an app with the engine double."""
    from app.main import create_app
    from app.settings import Settings

    document = create_app(Settings(), engine_factory=lambda spec: FakeEngine()).openapi()
    return [
        f"{method.upper()} {path}"
        for path, methods in document["paths"].items()
        for method in methods
    ]


def examples_of(operation: str) -> int:
    """Schemathesis's share: a fifth of FUZZ_EXAMPLES for an inference route (the edge-value
    strategies send the rest), a twentieth (at least 10) for every other operation."""
    return max(EXAMPLES // 5, 10) if operation in INFERENCE else max(EXAMPLES // 20, 10)


def conformance_checked(path: str, response: Any) -> bool:
    """JSON answers of the routes this server writes (the OpenAI double answers in short
    shapes; SSE events are checked by the stream tests)."""
    return not path.startswith("/v1/") and content_type(response).startswith("application/json")


def case_strategy(api_operation: Any) -> st.SearchStrategy[Any]:
    """Data that fits the schema and data that does not; half of the cases name the served
    model (path or body), so that they reach the engine rather than a 404."""
    named = {name: value for name, value in PINNED.items() if name in api_operation.path}
    if api_operation.path.startswith("/v2/repository/"):
        named = {}  # a model loaded or unloaded would change every later phase
    path_options = [{"path_parameters": named} if pinned else {} for pinned in (bool(named), False)]
    fitting = [
        api_operation.as_strategy(generation_mode=GenerationMode.POSITIVE, **placement)
        for placement in path_options
    ]
    misfits = [
        misfit_or_fitting(
            api_operation.as_strategy(generation_mode=GenerationMode.NEGATIVE, **placement), fit
        )
        for placement, fit in zip(path_options, fitting, strict=True)
    ]
    strategies = fitting + misfits
    return st.tuples(st.one_of(strategies), st.booleans()).map(name_the_model)


def name_the_model(drawn: tuple[Any, bool]) -> Any:
    case, pin = drawn
    if pin and isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = PINNED["model_name"]
    return case


def asked_for_a_timeout(case: Any) -> bool:
    """The case sets Triton's `timeout` parameter (in the body's `parameters` or at its top
    level, or in the query of an `EventSource` GET)."""
    body = case.body if isinstance(case.body, dict) else {}
    parameters = body.get("parameters")
    return (
        bool(body.get("timeout"))
        or (isinstance(parameters, dict) and bool(parameters.get("timeout")))
        or bool((case.query or {}).get("timeout"))
    )


@pytest.mark.parametrize("operation", operation_names())
def test_operation(operation: str, schema: Any, served: str, fuzz_report: None) -> None:
    method, path = operation.split(" ", 1)
    cases = case_strategy(schema[path][method])
    session = requests.Session()

    @given(case=cases)
    @settings(
        max_examples=examples_of(operation),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
    )
    def send(case: Any) -> None:
        started = time.perf_counter()
        response = case.call(base_url=served, session=session, timeout=30)
        status = response.status_code
        if status == DOCUMENTED.get(operation):
            status = f"{status} (Triton's)"
        elif status == CLIENT_DEADLINE_STATUS and asked_for_a_timeout(case):
            status = f"{status} (the request's own timeout)"
        REPORT.record(f"HTTP {operation}", status, time.perf_counter() - started)
        assert error_shape_holds(path, response), (response.status_code, response.text[:300])
        if conformance_checked(path, response):
            case.validate_response(response, checks=CONFORMANCE)
        if path == "/v1/responses" and "text/event-stream" in content_type(response):
            assert responses_stream_problem(response.text) is None, response.text[-600:]

    with readiness_probe(served) as probe:
        send()
    assert not probe.failures and probe.worst < PROBE_LIMIT_S, (probe.worst, probe.failures[:3])
    wait_until(lambda: requests_left(served) == 0, timeout=10)


@pytest.mark.parametrize("route", INFERENCE_ROUTES)
def test_edge_values(route: str, served: str, fuzz_report: None) -> None:
    """The rest of each inference route's inputs: well-typed edge values and grammars, and
    the families that once stalled or killed the server (tests/fuzz/families.py), some
    with their twin in the other streaming mode."""
    session = requests.Session()

    @given(request=requests_of(route))
    @settings(
        max_examples=EXAMPLES - examples_of(route),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
    )
    def send(request: Request) -> None:
        send_with_twin(session, served, request, "HTTP ", SLOW_SECONDS)

    with readiness_probe(served) as probe:
        send()
    assert not probe.failures and probe.worst < PROBE_LIMIT_S, (probe.worst, probe.failures[:3])
    wait_until(lambda: requests_left(served) == 0, timeout=10)


def test_stored_response_routes_are_404(served: str, fuzz_report: None) -> None:
    """GET and cancel of a response, whatever its id (routes the OpenAPI document leaves
    out, so schemathesis does not see them): a 404 naming `response_id`."""
    session = requests.Session()

    @given(request=stored_responses())
    @settings(
        max_examples=max(EXAMPLES // 20, 10),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )
    def send(request: Request) -> None:
        send_for_missing(session, served, request, "HTTP ", SLOW_SECONDS)

    send()


def test_every_inference_route_got_its_inputs() -> None:
    counts = {route: REPORT.count(f"HTTP {route}") for route in INFERENCE_ROUTES}
    assert all(count >= EXAMPLES for count in counts.values()), counts
    drawn = {
        (family, route): REPORT.count_of_family(family, f"HTTP {route}")
        for family in FAMILIES
        for route in INFERENCE_ROUTES
    }
    drawn[OVER_LIMIT, RESPONSES] = REPORT.count_of_family(OVER_LIMIT, f"HTTP {RESPONSES}")
    assert all(drawn.values()), [key for key, count in drawn.items() if not count]
    assert REPORT.pairs and not REPORT.mismatches, REPORT.mismatches
