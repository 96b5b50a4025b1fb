"""Hostile input: a schemathesis run over the OpenAPI schema and a list of nasty bodies.

Nothing a client sends may produce a 5xx, a hang, or a body other than `{"error": ...}`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
)

from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.repository import write_model


def fuzz_app(root: Path):
    write_model(root, "fake")
    return create_app(Settings(model_repository=root, max_request_body_bytes=1 << 20), engine_factory=lambda spec: FakeEngine())


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory: pytest.TempPathFactory):
    with TestClient(fuzz_app(tmp_path_factory.mktemp("fuzz")), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def nasty_client(tmp_path_factory: pytest.TempPathFactory):
    with TestClient(fuzz_app(tmp_path_factory.mktemp("nasty")), raise_server_exceptions=False) as client:
        yield client


CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance, negative_data_rejection]


def test_no_server_errors_and_responses_match_the_schema(fuzz_client: TestClient) -> None:
    """Every operation of our OpenAPI schema, with valid and invalid generated data."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_client.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True
        )
        def check(case) -> None:
            response = case.call(session=fuzz_client)
            case.validate_response(response, checks=CHECKS)
            if response.status_code >= 400 and response.headers.get("content-type") == "application/json":
                assert set(response.json()) == {"error"}, response.text

        check()


NASTY_BODIES: list[tuple[str, bytes | str, dict[str, str]]] = [
    ("huge integer", '{"text_input": "x", "parameters": {"max_tokens": 1' + "0" * 400 + "}}", {}),
    ("huge float", '{"text_input": "x", "parameters": {"temperature": 1e400}}', {}),
    ("NaN", '{"text_input": "x", "parameters": {"temperature": NaN}}', {}),
    ("Infinity", '{"text_input": "x", "parameters": {"top_p": Infinity}}', {}),
    ("negative seed overflow", '{"text_input": "x", "parameters": {"seed": -99999999999999999999999}}', {}),
    ("deep nesting", '{"text_input": "x", "parameters": ' + "[" * 5000 + "]" * 5000 + "}", {}),
    ("deep nesting in extras", '{"text_input": "x", "junk": ' + '{"a":' * 3000 + "1" + "}" * 3000 + "}", {}),
    ("invalid UTF-8", b'{"text_input": "\xc3\x28\xa0\xa1"}', {}),
    ("lone surrogate", '{"text_input": "\\ud800"}', {}),
    ("10 MB string", '{"text_input": "' + "a" * (10 * 1024 * 1024) + '"}', {}),
    ("form content type", "text_input=hello", {"content-type": "application/x-www-form-urlencoded"}),
    ("XML", "<text_input>hi</text_input>", {"content-type": "application/xml"}),
    ("multipart", "--b\r\nContent-Disposition: form-data; name=\"text_input\"\r\n\r\nhi\r\n--b--", {"content-type": "multipart/form-data; boundary=b"}),
    ("JSON null", "null", {}),
    ("JSON string", '"text"', {}),
    ("trailing garbage", '{"text_input": "x"} xyz', {}),
    ("duplicate keys", '{"text_input": "x", "text_input": 5}', {}),
    ("parameters as list", '{"text_input": "x", "parameters": [1, 2]}', {}),
    ("sampling_parameters nested junk", json.dumps({"text_input": "x", "sampling_parameters": "[[[[" * 1000}), {}),
    ("stop as object", '{"text_input": "x", "parameters": {"stop": {"a": 1}}}', {}),
    ("structured outputs junk", '{"text_input": "x", "parameters": {"structured_outputs": {"json": 5, "regex": 7}}}', {}),
    ("image junk", '{"text_input": "x", "image": [{"a": 1}]}', {}),
    ("n huge", '{"text_input": "x", "parameters": {"n": 100000000, "temperature": 1}}', {}),
    ("stop_token_ids huge", '{"text_input": "x", "parameters": {"stop_token_ids": [99999999999999999999]}}', {}),
]


@pytest.mark.parametrize(("label", "body", "headers"), NASTY_BODIES, ids=[b[0] for b in NASTY_BODIES])
@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_nasty_bodies_get_4xx_with_an_error(nasty_client: TestClient, route: str, label: str, body: bytes | str, headers: dict[str, str]) -> None:
    response = nasty_client.post(f"/v2/models/fake/{route}", content=body, headers=headers)
    assert 400 <= response.status_code < 500, (label, response.status_code, response.text[:300])
    assert response.headers["content-type"] == "application/json"
    assert set(response.json()) == {"error"} and response.json()["error"]


def test_nul_bytes_are_valid_text(nasty_client: TestClient) -> None:
    body = '{"text_input": "a\\u0000b", "parameters": {"stop": ["\\u0000"], "max_tokens": 3}}'
    response = nasty_client.post("/v2/models/fake/generate", content=body)
    assert response.status_code == 200
    assert response.json()["text_output"].startswith("a\x00b")
