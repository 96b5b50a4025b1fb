"""Triton's trace extension with the engine double: --trace-config read as Triton reads it, the
global and per-model settings with Triton's rules, sampling by rate and count, the HTTP routes
and gRPC TraceSetting with Triton's bodies and messages."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from fastapi.testclient import TestClient
from tritonclient.utils import InferenceServerException

from app.errors import InvalidRequestError
from app.observability.trace_config import FILE_REFUSAL, parse_trace_config
from app.observability.trace_settings import TraceSettings, change_from_json, change_to_json
from tests.doubles import FakeEngine
from tests.support.asgi import serve_in_thread
from tests.support.triton_grpc import GrpcApp, serve_grpc_app

OTEL = ["mode=opentelemetry", "opentelemetry,url=http://collector:4318/v1/traces"]


def test_the_defaults_are_tritons() -> None:
    config = parse_trace_config([])
    assert (config.level, config.rate, config.count, config.mode, config.file) == (
        frozenset(),
        1000,
        -1,
        "triton",
        "",
    )


def test_opentelemetry_settings_as_triton_reports_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4096")
    config = parse_trace_config(
        [
            *OTEL,
            "level=TIMESTAMPS",
            "rate=1",
            "count=5",
            "opentelemetry,resource=service.name=generate",
            "opentelemetry,resource=deployment=blue",
            "opentelemetry,bsp_schedule_delay=100",
        ]
    )
    assert (config.level, config.rate, config.count, config.mode) == (
        frozenset({"TIMESTAMPS"}),
        1,
        5,
        "opentelemetry",
    )
    assert config.url == "http://collector:4318/v1/traces"
    assert config.resource() == {"service.name": "generate", "deployment": "blue"}
    assert config.bsp("bsp_schedule_delay") == 100 and config.bsp("bsp_max_queue_size") == 4096
    assert config.bsp("bsp_max_export_batch_size") == 512


def test_level_words_and_off_winning() -> None:
    assert parse_trace_config(["level=timestamps", "level=TENSORS"]).level == {
        "TIMESTAMPS",
        "TENSORS",
    }
    assert parse_trace_config(["level=max", "level=off"]).level == frozenset()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["level=loud"], "invalid value for trace level option: loud"),
        (
            [",rate=1"],
            "No trace mode specified. --trace-config option format is "
            "<trace mode>,<setting>=<value> or <setting>=<value>. Got ,rate=1",
        ),
        (["rate"], "--trace-config option format is '<trace mode>,<setting>=<value>'. Got rate"),
        (
            ["jaeger,url=x"],
            'invalid value for trace mode option: jaeger. Available options are "triton" and '
            '"opentelemetry"',
        ),
        (["rate=often"], "--trace-config rate: expected an integer, got often"),
        (["count=-2"], "--trace-config count: expected an integer within [-1, 2147483647], got -2"),
        (
            [*OTEL, "opentelemetry,bsp_max_queue_size=big"],
            "--trace-config opentelemetry,bsp_max_queue_size: expected an integer, got big",
        ),
        (["triton,file=/tmp/trace.json"], FILE_REFUSAL),
    ],
)
def test_bad_options_are_refused_at_start(options: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_trace_config(options)


def test_a_trace_file_of_the_mode_not_used_is_ignored_as_triton_does() -> None:
    assert parse_trace_config([*OTEL, "triton,file=/tmp/x"]).mode == "opentelemetry"
    assert parse_trace_config(["colour=blue"]).unknown == ("colour=blue",)


def otel_settings(*extra: str) -> TraceSettings:
    return TraceSettings(parse_trace_config([*OTEL, *extra]))


def test_a_model_follows_the_global_setting_in_what_it_does_not_give() -> None:
    settings = otel_settings("level=TIMESTAMPS")
    settings.update("m", {"rate": 7})
    settings.update("", {"count": 3, "rate": 2})
    assert (settings.get("m").rate, settings.get("m").count) == (7, 3)
    assert (settings.get("other").rate, settings.get().rate) == (2, 2)
    settings.update("m", {"rate": None})
    assert settings.get("m").rate == 2
    settings.update("", {"rate": None, "count": None})
    assert (settings.get().rate, settings.get().count) == (1000, -1)


def test_invalid_settings_are_refused_with_tritons_message() -> None:
    with pytest.raises(
        InvalidRequestError,
        match=r"^Attempting to set invalid trace setting :trace file name is not given$",
    ):
        TraceSettings(parse_trace_config([])).update("", {"level": frozenset({"TIMESTAMPS"})})
    settings = otel_settings("level=TIMESTAMPS")
    with pytest.raises(InvalidRequestError, match="sample rate must be non-zero"):
        settings.update("", {"rate": 0})
    assert settings.get().rate == 1000
    settings.update("", {"rate": 0, "level": frozenset()})  # OFF: any setting goes
    assert settings.get().rate == 0


def test_sampling_by_rate_and_count_and_forced_by_a_trace_context() -> None:
    setting = otel_settings("level=TIMESTAMPS", "rate=2", "count=2").get()
    assert [setting.sample(False) for _ in range(6)] == [False, True, False, True, False, False]
    assert setting.count == 0 and setting.sample(True)
    off = otel_settings().get()
    assert not off.sample(True)
    only_propagated = otel_settings("level=TIMESTAMPS", "rate=0").get()
    assert [only_propagated.sample(False), only_propagated.sample(True)] == [False, True]


def test_a_change_crosses_processes_as_json() -> None:
    change = {"level": frozenset({"TIMESTAMPS"}), "rate": None, "count": 4}
    assert change_from_json(change_to_json(change)) == change


@pytest.fixture
def traced(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client(FakeEngine(), trace_config=[*OTEL, "opentelemetry,resource=service.name=t"])


def test_http_settings_round_trip(traced: TestClient) -> None:
    expected = {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "trace_mode": "opentelemetry",
        "url": "http://collector:4318/v1/traces",
        "resource": "service.name=t",
        "bsp_max_queue_size": "2048",
        "bsp_schedule_delay": "5000",
        "bsp_max_export_batch_size": "512",
    }
    assert traced.get("/v2/trace/setting").json() == expected
    changed = traced.post(
        "/v2/trace/setting", json={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
    )
    assert changed.status_code == 200
    assert changed.json() == {**expected, "trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
    model = traced.post("/v2/models/fake/trace/setting", json={"trace_count": "10"}).json()
    assert (model["trace_level"], model["trace_rate"], model["trace_count"]) == (
        ["TIMESTAMPS"],
        "1",
        "10",
    )
    assert traced.get("/v2/models/fake/trace/setting").json() == model
    assert traced.get("/v2/trace/setting").json()["trace_count"] == "-1"
    cleared = traced.post("/v2/models/fake/trace/setting", json={"trace_count": None}).json()
    assert cleared == traced.get("/v2/trace/setting").json()
    assert (
        traced.post("/v2/trace/setting", content=b"").json()
        == traced.get("/v2/trace/setting").json()
    )


def test_triton_mode_reports_the_file_settings(client: TestClient) -> None:
    assert client.get("/v2/trace/setting").json() == {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": "",
        "trace_mode": "triton",
    }


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"trace_file": "/etc/passwd"},
            501,
            "trace file location can not be updated through network protocol",
        ),
        ({"trace_rate": 5}, 400, "attempt to access JSON non-string as string"),
        ({"trace_rate": "often"}, 400, "Unable to parse 'trace_rate', got: often"),
        (
            {"trace_rate": "-3"},
            400,
            "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -3",
        ),
        (
            {"trace_count": "-5"},
            400,
            "Unable to parse 'trace_count'. Expecting value >= -1, got:-5",
        ),
        ({"trace_level": "TIMESTAMPS"}, 400, "attempt to access JSON non-array as array"),
        (
            {"trace_level": ["OFF", "TIMESTAMPS"]},
            400,
            "Expect only one trace level 'OFF' is specified",
        ),
        ({"log_frequency": "x"}, 400, "Unable to parse 'log_frequency', got: x"),
    ],
)
def test_bad_http_settings_get_tritons_answer(
    traced: TestClient, body: dict[str, Any], status: int, message: str
) -> None:
    before = traced.get("/v2/trace/setting").json()
    response = traced.post("/v2/trace/setting", json=body)
    assert (response.status_code, response.json()) == (status, {"error": message})
    assert traced.get("/v2/trace/setting").json() == before


def test_unknown_models_and_bad_json(traced: TestClient) -> None:
    for method in ("get", "post"):
        response = getattr(traced, method)("/v2/models/nope/trace/setting")
        assert (response.status_code, response.json()) == (
            400,
            {"error": "Request for unknown model : nope"},
        )
    response = traced.post("/v2/trace/setting", content=b"{nope")
    assert response.status_code == 400 and response.json()["error"].startswith(
        "failed to parse the request JSON"
    )
    assert traced.post("/v2/trace/setting", json=["TIMESTAMPS"]).status_code == 400


def test_tritonclient_http_reads_and_changes_settings(repository: Path) -> None:
    from app.main import create_app
    from app.settings import Settings

    app = create_app(
        Settings(model_repository=[repository], trace_config=OTEL),
        engine_factory=lambda spec: FakeEngine(),
    )
    with serve_in_thread(app) as url:
        client = triton_http.InferenceServerClient(url.removeprefix("http://"))
        updated = client.update_trace_settings(
            settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "3"}
        )
        assert (updated["trace_level"], updated["trace_rate"]) == (["TIMESTAMPS"], "3")
        assert client.get_trace_settings(model_name="fake")["trace_rate"] == "3"
        client.close()


@pytest.fixture
def grpc_app(repository: Path) -> Iterator[GrpcApp]:
    with serve_grpc_app(repository, lambda spec: FakeEngine(), trace_config=OTEL) as app:
        yield app


def test_grpc_settings_round_trip(grpc_app: GrpcApp) -> None:
    with triton_grpc.InferenceServerClient(grpc_app.grpc_url) as client:
        settings = client.get_trace_settings(as_json=True)["settings"]
        assert settings["trace_level"] == {"value": ["OFF"]} and settings["trace_mode"] == {
            "value": ["opentelemetry"]
        }
        assert (
            settings["bsp_max_queue_size"] == {"value": ["2048"]} and "trace_file" not in settings
        )
        changed = client.update_trace_settings(
            settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "4"}, as_json=True
        )
        assert changed["settings"]["trace_rate"] == {"value": ["4"]}
        model = client.update_trace_settings("fake", {"trace_count": "2"}, as_json=True)["settings"]
        assert (model["trace_rate"], model["trace_count"]) == ({"value": ["4"]}, {"value": ["2"]})
        cleared = client.update_trace_settings("fake", {"trace_count": None}, as_json=True)[
            "settings"
        ]
        assert cleared["trace_count"] == {"value": ["-1"]}
        http = TestClient(grpc_app.app).get("/v2/trace/setting").json()
        assert (http["trace_level"], http["trace_rate"]) == (["TIMESTAMPS"], "4")


@pytest.mark.parametrize(
    ("model", "settings", "status", "message"),
    [
        (
            "",
            {"trace_file": "x"},
            "StatusCode.UNIMPLEMENTED",
            "trace file location can not be updated through network protocol",
        ),
        (
            "",
            {"trace_rate": ["1", "2"]},
            "StatusCode.INVALID_ARGUMENT",
            "expect only 1 value for 'trace_rate'",
        ),
        (
            "",
            {"trace_count": "-9"},
            "StatusCode.INVALID_ARGUMENT",
            "Unable to parse 'trace_count'. Expecting value >= -1, got: -9",
        ),
        ("nope", {}, "StatusCode.INVALID_ARGUMENT", "Request for unknown model : nope"),
    ],
)
def test_bad_grpc_settings_get_tritons_status(
    grpc_app: GrpcApp, model: str, settings: dict[str, Any], status: str, message: str
) -> None:
    with (
        triton_grpc.InferenceServerClient(grpc_app.grpc_url) as client,
        pytest.raises(InferenceServerException) as raised,
    ):
        client.update_trace_settings(model, settings)
    assert (raised.value.status(), raised.value.message()) == (status, message)
