"""Triton's logging extension with the engine double, on HTTP (`/v2/logging`) and gRPC
(`LogSettings`, through tritonclient): Triton's bodies and errors, and a change that applies to
the very next log record, in Triton's line formats."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import tritonclient.grpc as triton_grpc
from fastapi.testclient import TestClient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from app.observability.log_control import LOG_CONTROL, LogSettings
from tests.doubles import FakeEngine
from tests.support.triton_grpc import GrpcApp, serve_grpc_app

DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}
DEFAULT_LINE = re.compile(r"I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ access_log\.py:\d+\] request_id=")
ISO8601_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ access_log\.py:\d+\] request_id=")


@pytest.fixture
def log() -> Iterator[io.StringIO]:
    """The process's log (Triton's default settings), written to a buffer; restored after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    LOG_CONTROL.configure(LogSettings(), stream)
    yield stream
    LOG_CONTROL.apply(LogSettings())
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    """The process's log appended to a file (Triton's --log-file); a buffer's again after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    path = tmp_path / "server.log"
    path.write_text("a line of an earlier run\n")
    LOG_CONTROL.configure(LogSettings(), file=str(path))
    yield path
    LOG_CONTROL.configure(LogSettings(), io.StringIO())
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def served(repository: Path, log: io.StringIO) -> Iterator[GrpcApp]:
    with serve_grpc_app(repository, lambda spec: FakeEngine()) as app:
        yield app


def test_http_settings_round_trip(client: TestClient, log: io.StringIO) -> None:
    assert client.get("/v2/logging").json() == DEFAULTS
    changed = client.post(
        "/v2/logging", json={"log_verbose_level": 2, "log_info": False, "log_format": "ISO8601"}
    )
    assert changed.status_code == 200
    expected = {**DEFAULTS, "log_verbose_level": 2, "log_info": False, "log_format": "ISO8601"}
    assert changed.json() == expected
    assert client.get("/v2/logging").json() == expected
    assert client.post("/v2/logging", json={"log_warning": None}).json() == expected, (
        "null leaves it as it is"
    )
    assert client.post("/v2/logging", content=b"").json() == expected, (
        "an empty body changes nothing"
    )


def test_a_change_applies_to_the_next_request(client: TestClient, log: io.StringIO) -> None:
    client.get("/v2/health/ready", headers={"X-Request-ID": "before-1"})
    assert DEFAULT_LINE.search(log.getvalue()) and "request_id=before-1" in log.getvalue()
    client.post("/v2/logging", json={"log_info": False})
    client.get("/v2/health/ready", headers={"X-Request-ID": "quiet-1"})
    assert "quiet-1" not in log.getvalue(), "info records are off"
    client.post("/v2/logging", json={"log_info": True, "log_format": "ISO8601"})
    client.get("/v2/health/ready", headers={"X-Request-ID": "after-1"})
    last = log.getvalue().strip().splitlines()[-1]
    assert ISO8601_LINE.match(last) and "request_id=after-1" in last, last


def test_verbose_level_turns_debug_records_on(client: TestClient, log: io.StringIO) -> None:
    logging.getLogger("app.test").debug("hidden detail")
    client.post("/v2/logging", json={"log_verbose_level": 1})
    logging.getLogger("app.test").debug("shown detail")
    assert "hidden detail" not in log.getvalue() and "shown detail" in log.getvalue()


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"log_file": "/tmp/server.log"},
            501,
            "log file location can not be updated through network protocol",
        ),
        ({"log_info": "yes"}, 400, "log_info: attempt to access JSON non-boolean as boolean"),
        (
            {"log_verbose_level": -1},
            400,
            "log_verbose_level: attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            {"log_verbose_level": True},
            400,
            "log_verbose_level: attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            {"log_verbose_level": 1.5},
            400,
            "log_verbose_level: attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        ({"log_format": 1}, 400, "log_format: attempt to access JSON non-string as string"),
        ({"log_format": "json"}, 400, "invalid argument for --log_format, got: json"),
        ([1, 2], 400, "the request body must be a JSON object of log settings"),
    ],
)
def test_http_refusals(
    client: TestClient, log: io.StringIO, body: object, status: int, message: str
) -> None:
    refused = client.post(
        "/v2/logging", json={**body, "log_error": False} if isinstance(body, dict) else body
    )
    assert (refused.status_code, refused.json()) == (status, {"error": message})
    assert client.get("/v2/logging").json() == DEFAULTS, "a refused request changes nothing"


def test_a_log_file_takes_the_lines_and_is_reported_but_not_changed(
    client: TestClient, log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert client.get("/v2/logging").json() == {**DEFAULTS, "log_file": str(log_file)}
    client.get("/v2/health/ready", headers={"X-Request-ID": "to-file-1"})
    text = log_file.read_text()
    assert text.startswith("a line of an earlier run\n"), "appended to"
    assert "request_id=to-file-1" in text and DEFAULT_LINE.search(text)
    assert "to-file-1" not in capsys.readouterr().err, "not on the console"
    refused = client.post("/v2/logging", json={"log_file": str(log_file.with_name("other.log"))})
    assert refused.status_code == 501
    changed = client.post("/v2/logging", json={"log_format": "ISO8601"}).json()
    assert changed == {**DEFAULTS, "log_file": str(log_file), "log_format": "ISO8601"}


def test_other_methods_are_not_allowed(client: TestClient) -> None:
    assert client.put("/v2/logging", json={}).status_code == 405


def test_the_logging_group_can_be_restricted(
    make_client, engine: FakeEngine, log: io.StringIO
) -> None:
    client = make_client(engine, http_restricted_api=["logging:admin-key=secret"])
    refused = client.post("/v2/logging", json={"log_info": False})
    assert (refused.status_code, refused.json()) == (
        403,
        {"error": "This API is restricted, expecting header 'admin-key'"},
    )
    assert (
        client.post(
            "/v2/logging", json={"log_info": False}, headers={"admin-key": "secret"}
        ).status_code
        == 200
    )


def test_grpc_settings_round_trip(served: GrpcApp) -> None:
    with triton_grpc.InferenceServerClient(served.grpc_url) as client:
        assert values(client.get_log_settings(as_json=True)) == DEFAULTS
        change = {"log_verbose_level": 1, "log_warning": False, "log_format": "ISO8601"}
        expected = {**DEFAULTS, **change}
        assert values(client.update_log_settings(change, as_json=True)) == expected
    assert httpx.get(f"{served.http_url}/v2/logging").json() == expected, (
        "one setting for both protocols"
    )


@pytest.mark.parametrize(
    ("name", "kind", "value", "code", "message"),
    [
        (
            "log_file",
            "string_param",
            "x.log",
            "UNIMPLEMENTED",
            "log file location can not be updated through network protocol",
        ),
        ("log_info", "uint32_param", 1, "INVALID_ARGUMENT", "expect boolean for 'log_info'"),
        (
            "log_verbose_level",
            "string_param",
            "2",
            "INVALID_ARGUMENT",
            "expect int32 for 'log_verbose_level'",
        ),
        ("log_format", "bool_param", True, "INVALID_ARGUMENT", "expect string for 'log_format'"),
        (
            "log_format",
            "string_param",
            "json",
            "INVALID_ARGUMENT",
            "invalid argument for log_format, got: json",
        ),
    ],
)
def test_grpc_refusals(
    served: GrpcApp, name: str, kind: str, value: object, code: str, message: str
) -> None:
    """Sent as raw messages: tritonclient picks each setting's kind by its name."""
    request = service_pb2.LogSettingsRequest()
    setattr(request.settings[name], kind, value)
    request.settings["log_error"].bool_param = False
    with grpc.insecure_channel(served.grpc_url) as channel, pytest.raises(grpc.RpcError) as raised:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).LogSettings(request)
    assert (raised.value.code().name, raised.value.details()) == (code, message)
    with triton_grpc.InferenceServerClient(served.grpc_url) as client:
        assert values(client.get_log_settings(as_json=True)) == DEFAULTS, (
            "a refused request changes nothing"
        )


def values(response: dict[str, dict[str, dict[str, object]]]) -> dict[str, object]:
    """A LogSettingsResponse (tritonclient's JSON) as setting -> value."""
    return {name: next(iter(value.values())) for name, value in response["settings"].items()}


@pytest.mark.parametrize(
    ("level", "verbose", "switches", "expected"),
    [
        ("info", 0, (True, True, True), LogSettings()),
        ("debug", 0, (True, True, True), LogSettings(verbose=1)),
        ("warning", 0, (True, True, True), LogSettings(info=False)),
        ("error", 2, (True, True, True), LogSettings(info=False, warning=False, verbose=2)),
        ("info", 0, (False, True, False), LogSettings(info=False, error=False)),
    ],
)
def test_log_level_and_tritons_switches_combine(
    level: str, verbose: int, switches: tuple[bool, bool, bool], expected: LogSettings
) -> None:
    """LOG_LEVEL is a shorthand; Triton's --log-info/-warning/-error can only turn one off."""
    assert LogSettings.of(level, "default", verbose, *switches) == expected
