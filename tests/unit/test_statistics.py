"""Triton's statistics extension over HTTP, the statistics the core records, and inputs named
inside `parameters` on /generate (Triton's mapping, as the backend's multi_lora CI sends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as triton_http
from fastapi.testclient import TestClient

from app.core.timing import RequestTiming
from app.main import create_app
from app.observability.statistics import InferenceStatistics
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.asgi import serve_in_thread
from tests.support.repository import EXPLICIT_CONTROL, write_model


def test_http_statistics_routes(client: TestClient) -> None:
    for _ in range(2):
        assert (
            client.post(
                "/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 2}
            ).status_code
            == 200
        )
    assert (
        client.post(
            "/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 99999}
        ).status_code
        == 400
    )
    everything = client.get("/v2/models/stats").json()
    assert (
        everything
        == client.get("/v2/models/fake/stats").json()
        == client.get("/v2/models/fake/versions/1/stats").json()
    )
    [stats] = everything["model_stats"]
    assert list(stats) == [
        "name",
        "version",
        "last_inference",
        "inference_count",
        "execution_count",
        "inference_stats",
        "response_stats",
        "batch_stats",
        "memory_usage",
    ]
    assert (
        stats["name"],
        stats["version"],
        stats["inference_count"],
        stats["execution_count"],
    ) == ("fake", "1", 2, 2)
    inference = stats["inference_stats"]
    assert (
        inference["success"]["count"]
        == inference["queue"]["count"]
        == inference["compute_infer"]["count"]
        == 2
    )
    assert inference["fail"]["count"] == 1 and inference["cache_hit"] == {"count": 0, "ns": 0}
    assert (
        stats["batch_stats"][0]["batch_size"] == 1
        and stats["batch_stats"][0]["compute_infer"]["count"] == 2
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v2/models/nope/stats", "requested model 'nope' is not available"),
        (
            "/v2/models/fake/versions/2/stats",
            "requested model version is not available for model 'fake'",
        ),
    ],
)
def test_statistics_of_a_model_not_ready_is_a_400(
    client: TestClient, path: str, message: str
) -> None:
    response = client.get(path)
    assert response.status_code == 400 and response.json() == {"error": message}


def test_unhealthy_models_are_left_out(client: TestClient, engine: FakeEngine) -> None:
    engine.healthy = False
    assert client.get("/v2/models/stats").json() == {"model_stats": []}
    assert client.get("/v2/models/fake/stats").status_code == 400


def test_tritonclient_http_reads_statistics(repository: Path) -> None:
    app = create_app(
        Settings(model_repository=[repository]), engine_factory=lambda spec: FakeEngine()
    )
    with serve_in_thread(app) as url:
        client = triton_http.InferenceServerClient(url.removeprefix("http://"))
        stats = client.get_inference_statistics("fake")
        client.close()
    assert (
        stats["model_stats"][0]["name"] == "fake"
        and stats["model_stats"][0]["inference_count"] == 0
    )


def test_a_request_the_client_left_counts_as_success_and_an_error_as_failure() -> None:
    statistics = InferenceStatistics()
    left = RequestTiming("m", "1")
    left.admitted()
    statistics.record_request(left)
    failed = RequestTiming("m", "1", failed=True)
    statistics.record_request(failed)
    stats = statistics.model_json("m", "1")
    assert (
        stats["inference_stats"]["success"]["count"] == 1
        and stats["inference_stats"]["fail"]["count"] == 1
    )
    assert stats["inference_stats"]["compute_input"] == {"count": 1, "ns": 0}
    statistics.forget("m")
    assert statistics.model_json("m", "1")["inference_count"] == 0


def test_inputs_inside_parameters_are_those_inputs(client: TestClient) -> None:
    """The backend's multi_lora CI: `exclude_input_in_output` inside `parameters` on /generate."""
    body: dict[str, Any] = {
        "text_input": "x",
        "parameters": {
            "stream": False,
            "temperature": 0,
            "top_p": 1,
            "max_tokens": 2,
            "exclude_input_in_output": True,
            "return_num_output_tokens": True,
        },
    }
    response = client.post("/v2/models/fake/generate", json=body)
    assert response.status_code == 200, response.text
    assert (
        response.json()["text_output"] == "Hello from" and response.json()["num_output_tokens"] == 2
    )
    lora = client.post(
        "/v2/models/fake/generate",
        json={**body, "parameters": {**body["parameters"], "lora_name": "x"}},
    )
    assert lora.status_code == 400 and lora.json() == {"error": "LoRA feature is not enabled."}


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"exclude_input_in_outputs": True},
            "parameters.exclude_input_in_outputs: unknown sampling parameter",
        ),
        (
            {"exclude_input_in_output": "maybe"},
            "parameters.exclude_input_in_output: Input should be a valid boolean",
        ),
    ],
)
def test_typos_and_bad_values_in_parameters_stay_400s(
    client: TestClient, parameters: dict[str, Any], message: str
) -> None:
    response = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "parameters": parameters}
    )
    assert response.status_code == 400 and response.json()["error"].startswith(message)


def test_an_input_given_twice_is_a_400(client: TestClient) -> None:
    body = {
        "text_input": "x",
        "exclude_input_in_output": False,
        "parameters": {"exclude_input_in_output": True},
    }
    response = client.post("/v2/models/fake/generate", json=body)
    assert response.status_code == 400
    assert response.json() == {
        "error": "parameters.exclude_input_in_output: "
        "also given as the input 'exclude_input_in_output'"
    }


def test_statistics_start_again_after_a_reload(tmp_path: Path) -> None:
    write_model(tmp_path / "repo", "fake")
    settings = Settings(model_repository=[tmp_path / "repo"], **EXPLICIT_CONTROL)
    app = create_app(settings, engine_factory=lambda spec: FakeEngine())
    with TestClient(app) as http:
        http.post("/v2/models/fake/generate", json={"text_input": "x", "max_tokens": 1})
        assert http.get("/v2/models/fake/stats").json()["model_stats"][0]["inference_count"] == 1
        assert http.post("/v2/repository/models/fake/load").status_code == 200
        assert http.get("/v2/models/fake/stats").json()["model_stats"][0]["inference_count"] == 0
