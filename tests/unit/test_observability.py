"""Access log, request ids, HTTP metrics and the per-request engine health check (engine double)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.observability.log_control import LOG_CONTROL, LogSettings
from tests.doubles import FakeEngine
from tests.support.access_log import access_fields
from tests.support.clients import runtime_of
from tests.support.repository import write_model


def access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "app.access"]


def test_request_id_is_returned_and_logged_with_model_and_tokens(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    response = client.post(
        "/v2/models/fake/generate",
        json={"text_input": "secret prompt", "parameters": {"max_tokens": 3}},
        headers={"X-Request-ID": "req-42"},
    )
    assert response.headers["x-request-id"] == "req-42"
    (record,) = [r for r in access_lines(caplog) if access_fields(r)["path"].endswith("/generate")]
    fields = access_fields(record)
    assert fields["request_id"] == "req-42" and fields["status"] == 200
    assert (fields["model"], fields["version"]) == ("fake", "1")
    assert fields["prompt_tokens"] == 2 and fields["generated_tokens"] == 3
    assert fields["ttft_ms"] is not None and fields["total_ms"] >= fields["ttft_ms"]
    assert "secret prompt" not in record.getMessage() and "prompt" not in fields


def test_stream_is_logged_once_when_it_ends(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    response = client.post(
        "/v2/models/fake/generate_stream", json={"text_input": "x", "parameters": {"max_tokens": 4}}
    )
    assert len(response.headers["x-request-id"]) == 32
    (record,) = [
        r for r in access_lines(caplog) if access_fields(r)["path"].endswith("generate_stream")
    ]
    assert access_fields(record)["generated_tokens"] == 4


def test_prompts_are_logged_only_when_enabled(
    make_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.access")
    client = make_client(FakeEngine(), log_prompts=True)
    client.post("/v2/models/fake/generate", json={"text_input": "visible prompt"})
    assert any(access_fields(r).get("prompt") == "visible prompt" for r in access_lines(caplog))


def test_json_log_format_writes_one_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    LOG_CONTROL.configure(LogSettings(format="json"))
    try:
        logging.getLogger("app.access").info(
            "ignored", extra={"access": {"request_id": "r1", "status": 200}}
        )
        line = capsys.readouterr().err.strip().splitlines()[-1]
        data = json.loads(line)
        assert data["request_id"] == "r1" and data["status"] == 200 and data["levelname"] == "INFO"
    finally:
        LOG_CONTROL.apply(LogSettings())
        logging.getLogger().handlers.clear()


def test_http_metrics_use_route_templates_not_raw_paths(client: TestClient) -> None:
    client.post("/v2/models/fake/generate", json={"text_input": "x"})
    client.post("/v2/models/unknown-model-123/generate", json={"text_input": "x"})
    client.get("/some/random/path")
    text = client.get("/metrics").text
    assert "unknown-model-123" not in text and "/some/random/path" not in text
    samples = {
        (s.labels["handler"], s.labels["status"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "http_requests"
        for s in family.samples
        if s.name == "http_requests_total"
    }
    assert samples[("/v2/models/{model_name}/generate", "200")] == 1
    assert samples[("/v2/models/{model_name}/generate", "404")] == 1


def test_health_check_runs_before_each_request_when_enabled(
    make_client: Callable[..., TestClient], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "hc"
    write_model(
        root,
        "fake",
        config='parameters: { key: "ENABLE_VLLM_HEALTH_CHECK" value: { string_value: "true" } }',
    )
    engine = FakeEngine()
    calls: list[int] = []
    original = engine.check_health

    async def counting_check() -> None:
        calls.append(1)
        await original()

    monkeypatch.setattr(engine, "check_health", counting_check)
    client = make_client(engine, root)
    assert client.post("/v2/models/fake/generate", json={"text_input": "x"}).status_code == 200
    assert (
        client.post("/v2/models/fake/generate_stream", json={"text_input": "x"}).status_code == 200
    )
    assert len(calls) == 2
    engine.healthy = False
    response = client.post("/v2/models/fake/generate", json={"text_input": "x"})
    assert response.status_code == 503
    assert client.get("/v2/models/fake/ready").status_code == 503


def test_load_gauges_report_admitted_and_engine_held_requests(
    client: TestClient, engine: FakeEngine
) -> None:
    def gauges() -> dict[str, float]:
        text = client.get("/metrics").text
        return {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("server_") and s.labels == {"model": "fake", "version": "1"}
        }

    assert gauges() == {"server_requests_in_flight": 0, "server_engine_requests_unfinished": 0}
    runtime_of(client).registry.get("fake").in_flight.update({"a": False, "b": False})
    engine.active.add("a")
    assert gauges() == {"server_requests_in_flight": 2, "server_engine_requests_unfinished": 1}
