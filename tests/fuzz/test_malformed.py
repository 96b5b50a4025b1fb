"""Malformed bodies (not JSON, deeply nested, huge numbers, wrong types, other content
types) on every inference route: a 4xx with an error body in the route's shape, never a 5xx
or a hang. (Schema-driven and edge-value inputs: test_http_double.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.fuzz.report import REPORT
from tests.support.repository import write_model


def fuzz_app(root: Path):
    write_model(root, "fake")
    settings = Settings(
        model_repository=[root],
        max_request_body_bytes=1 << 20,
        model_control_mode="explicit",
        load_model=["*"],
    )
    return create_app(settings, engine_factory=lambda spec: FakeEngine())


@pytest.fixture(scope="module")
def nasty_client(tmp_path_factory: pytest.TempPathFactory):
    with TestClient(
        fuzz_app(tmp_path_factory.mktemp("nasty")), raise_server_exceptions=False
    ) as client:
        yield client


NASTY_BODIES: list[tuple[str, bytes | str, dict[str, str]]] = [
    ("huge integer", '{"text_input": "x", "parameters": {"max_tokens": 1' + "0" * 400 + "}}", {}),
    ("huge float", '{"text_input": "x", "parameters": {"temperature": 1e400}}', {}),
    ("NaN", '{"text_input": "x", "parameters": {"temperature": NaN}}', {}),
    ("Infinity", '{"text_input": "x", "parameters": {"top_p": Infinity}}', {}),
    (
        "negative seed overflow",
        '{"text_input": "x", "parameters": {"seed": -99999999999999999999999}}',
        {},
    ),
    ("deep nesting", '{"text_input": "x", "parameters": ' + "[" * 5000 + "]" * 5000 + "}", {}),
    (
        "deep nesting in extras",
        '{"text_input": "x", "junk": ' + '{"a":' * 3000 + "1" + "}" * 3000 + "}",
        {},
    ),
    ("invalid UTF-8", b'{"text_input": "\xc3\x28\xa0\xa1"}', {}),
    ("lone surrogate", '{"text_input": "\\ud800"}', {}),
    ("10 MB string", '{"text_input": "' + "a" * (10 * 1024 * 1024) + '"}', {}),
    (
        "form content type",
        "text_input=hello",
        {"content-type": "application/x-www-form-urlencoded"},
    ),
    ("XML", "<text_input>hi</text_input>", {"content-type": "application/xml"}),
    (
        "multipart",
        '--b\r\nContent-Disposition: form-data; name="text_input"\r\n\r\nhi\r\n--b--',
        {"content-type": "multipart/form-data; boundary=b"},
    ),
    ("JSON null", "null", {}),
    ("JSON string", '"text"', {}),
    ("trailing garbage", '{"text_input": "x"} xyz', {}),
    ("duplicate keys", '{"text_input": "x", "text_input": 5}', {}),
    ("parameters as list", '{"text_input": "x", "parameters": [1, 2]}', {}),
    (
        "sampling_parameters nested junk",
        json.dumps({"text_input": "x", "sampling_parameters": "[[[[" * 1000}),
        {},
    ),
    ("stop as object", '{"text_input": "x", "parameters": {"stop": {"a": 1}}}', {}),
    (
        "structured outputs junk",
        '{"text_input": "x", "parameters": {"structured_outputs": {"json": 5, "regex": 7}}}',
        {},
    ),
    ("image junk", '{"text_input": "x", "image": [{"a": 1}]}', {}),
    ("n huge", '{"text_input": "x", "parameters": {"n": 100000000, "temperature": 1}}', {}),
    (
        "stop_token_ids huge",
        '{"text_input": "x", "parameters": {"stop_token_ids": [99999999999999999999]}}',
        {},
    ),
]


SYNTAX = {
    "NaN", "Infinity", "deep nesting", "deep nesting in extras", "invalid UTF-8", "10 MB string",
    "form content type", "XML", "multipart", "JSON null", "JSON string", "trailing garbage",
}  # fmt: skip
"""Bodies malformed before any field is read, sent to the OpenAI routes too (the others are
Triton-shaped: the OpenAI double reads only a few fields)."""
ROUTES = [
    "/v2/models/fake/generate",
    "/v2/models/fake/generate_stream",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/responses",
]


CASES = [
    (route, *case)
    for route in ROUTES
    for case in NASTY_BODIES
    if not route.startswith("/v1/") or case[0] in SYNTAX
]


@pytest.mark.parametrize(
    ("route", "label", "body", "headers"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_nasty_bodies_get_4xx_with_an_error(
    nasty_client: TestClient,
    route: str,
    label: str,
    body: bytes | str,
    headers: dict[str, str],
    fuzz_report: None,
) -> None:
    if route.startswith("/v1/") and isinstance(body, str) and body.startswith('{"text_input"'):
        field = "input" if route == "/v1/responses" else "prompt"
        body = body.replace('"text_input"', f'"model": "fake", "{field}"', 1)
    started = time.perf_counter()
    response = nasty_client.post(route, content=body, headers=headers)
    REPORT.record(
        f"HTTP POST {route} (malformed)", response.status_code, time.perf_counter() - started
    )
    assert 400 <= response.status_code < 500, (label, response.status_code, response.text[:300])
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(response.json()) == {"error"} and error
    assert isinstance(error, dict) if route.startswith("/v1/") else isinstance(error, str), error


def test_nul_bytes_are_valid_text(nasty_client: TestClient) -> None:
    body = '{"text_input": "a\\u0000b", "parameters": {"stop": ["\\u0000"], "max_tokens": 3}}'
    response = nasty_client.post("/v2/models/fake/generate", content=body)
    assert response.status_code == 200
    assert response.json()["text_output"].startswith("a\x00b")
