"""No client-sent text can forge an access-log line or field; failed requests are logged and
counted as failures (engine double)."""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from app.errors import EngineUnhealthyError
from app.observability.access_log import AccessJsonFormatter, format_plain
from tests.doubles import FakeEngine
from tests.support.access_log import access_fields


def access_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "app.access"]


def test_a_newline_in_the_path_is_escaped_in_the_text_log(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    client.get("/v2/models/x%0AINFO%20app.access:%20request_id=forged%20status=200/ready")
    (record,) = access_records(caplog)
    line = record.getMessage()
    assert "\n" not in line and "\r" not in line
    assert 'path="/v2/models/x\\nINFO app.access: request_id=forged status=200/ready"' in line
    fields = dict(token.split("=", 1) for token in shlex.split(line))  # logfmt: one value per key
    assert fields["status"] == "404" and fields["request_id"] == access_fields(record)["request_id"]
    assert (
        access_fields(record)["path"]
        == "/v2/models/x\nINFO app.access: request_id=forged status=200/ready"
    )
    data = json.loads(AccessJsonFormatter("%(message)s").format(record))
    assert data["path"] == access_fields(record)["path"]  # JSON logs carry the value, JSON-escaped


@pytest.mark.parametrize(
    "header",
    ["abc def", "x status=500", "a\tb", "é", "x" * 129, "", "id\nforged"],
)
def test_an_unsafe_request_id_is_replaced(
    client: TestClient, caplog: pytest.LogCaptureFixture, header: str
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    response = client.get("/v2/health/live", headers={b"X-Request-ID": header.encode("utf-8")})
    returned = response.headers["x-request-id"]
    assert returned != header and len(returned) == 32 and returned.isalnum()
    (record,) = access_records(caplog)
    assert access_fields(record)["request_id"] == returned


@pytest.mark.parametrize(
    "header", ["req-42", "0af7651916cd43dd8448eb211c80319c", "trace:span/1=+_."]
)
def test_a_safe_request_id_is_kept(client: TestClient, header: str) -> None:
    assert (
        client.get("/v2/health/live", headers={"X-Request-ID": header}).headers["x-request-id"]
        == header
    )


def test_every_text_field_is_quoted_and_escaped_when_needed() -> None:
    line = format_plain(
        {
            "a": "plain",
            "b": 'say "hi"',
            "c": "back\\slash",
            "d": "\x1b[31mred",
            "e": "",
            "f": 3,
            "g": None,
        }
    )
    assert line == 'a=plain b="say \\"hi\\"" c="back\\\\slash" d="\\u001b[31mred" e="" f=3'


def test_a_request_that_fails_after_its_stream_started_is_logged_as_failed(
    make_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    client = make_client(FakeEngine(fail_after=2, fail_with=EngineUnhealthyError()))
    response = client.post(
        "/v2/models/fake/generate_stream", json={"text_input": "x", "parameters": {"max_tokens": 5}}
    )
    assert response.status_code == 200 and '{"error":' in response.text
    (record,) = access_records(caplog)
    assert access_fields(record)["error"] == "Model is unavailable due to unhealthy vLLM engine"
    assert 'error="Model is unavailable due to unhealthy vLLM engine"' in record.getMessage()
    metrics = client.get("/metrics").text
    assert 'nv_inference_request_failure{model="fake",reason="BACKEND",version="1"} 1.0' in metrics
    assert 'nv_inference_request_success{model="fake",version="1"} 0.0' in metrics
    assert (
        client.get("/v2/models/fake/stats").json()["model_stats"][0]["inference_stats"]["fail"][
            "count"
        ]
        == 1
    )


def test_an_error_response_is_logged_with_its_message(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    response = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "parameters": {"temprature": 1}}
    )
    assert response.status_code == 400
    (record,) = access_records(caplog)
    assert access_fields(record)["status"] == 400 and access_fields(record)["error"].startswith(
        "parameters.temprature"
    )
