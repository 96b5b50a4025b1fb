"""Triton's poll mode against the real engine: a server started on an empty repository loads
a model folder copied in, reloads it when its model.json changes (serving throughout) and
unloads it when the folder goes; load requests answer 503 meanwhile, and the code upload of
tests/integration/test_security_real_engine.py is refused over HTTP (JSON and text/plain) and
gRPC without running."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as triton_grpc

from app.paths import PROJECT_ROOT
from tests.integration.test_security_real_engine import (
    LOAD,
    MODE_REFUSAL,
    code_upload,
    grpc_refusal,
    http_body,
)
from tests.support.servers import RunningServer, start_server
from tests.support.waiting import wait_until

MODEL = PROJECT_ROOT / "configs" / "model_repository" / "smollm2"
ENGINE_START_S = 300


@pytest.fixture(scope="module")
def polled(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningServer, Path, Path]]:
    """The poll-mode server, its repository folder and transformers' modules cache."""
    root = tmp_path_factory.mktemp("polled")
    modules_cache = tmp_path_factory.mktemp("hf-modules")
    env = {
        "MODEL_CONTROL_MODE": "poll",
        "REPOSITORY_POLL_SECS": "1",
        "HF_MODULES_CACHE": str(modules_cache),
    }
    server = start_server("--model-repository", str(root), name="poll", env=env)
    yield server, root, modules_cache
    code, alive = server.stop()
    for process in alive:
        process.kill()
    assert code == 0, server.log_tail()


def max_model_len(http: httpx.Client) -> int:
    (card,) = http.get("/v1/models").json()["data"]
    return int(card["max_model_len"])


def refuse_the_code_upload(server: RunningServer, http: httpx.Client, marker: Path) -> None:
    """The upload that would run code, with and without trust_remote_code: Triton's 503 over
    JSON, 415 as text/plain (what a web page sends unasked), gRPC UNAVAILABLE."""
    config = json.dumps({"backend": "vllm"})
    with triton_grpc.InferenceServerClient(server.grpc_url) as grpc_client:
        for trust in (True, False):
            files = code_upload(marker, trust)
            response = http.post(LOAD, json=http_body(files))
            assert (response.status_code, response.json()) == (503, {"error": MODE_REFUSAL})
            text = http.post(
                LOAD, content=json.dumps(http_body(files)), headers={"Content-Type": "text/plain"}
            )
            assert text.status_code == 415
            assert grpc_refusal(grpc_client.load_model, "smollm2", config=config, files=files) == (
                "StatusCode.UNAVAILABLE",
                MODE_REFUSAL,
            )


def test_poll_mode_follows_the_folder(
    polled: tuple[RunningServer, Path, Path], tmp_path: Path
) -> None:
    server, root, modules_cache = polled
    marker = tmp_path / "pwned"
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        assert http.post("/v2/repository/index").json() == []
        shutil.copytree(MODEL, root / "smollm2")
        wait_until(
            lambda: http.get("/v2/models/smollm2/ready").status_code == 200, timeout=ENGINE_START_S
        )
        assert max_model_len(http) == 2048
        refuse_the_code_upload(server, http, marker)
        assert http.get("/v2/models/smollm2/ready").status_code == 200
        model_json = root / "smollm2" / "1" / "model.json"
        model_json.write_text(
            json.dumps({**json.loads(model_json.read_text()), "max_model_len": 1024})
        )
        wait_until(lambda: max_model_len(http) == 1024, timeout=ENGINE_START_S)
        assert (
            http.post(
                "/v2/models/smollm2/generate",
                json={"text_input": "Hi", "parameters": {"max_tokens": 2}},
            ).status_code
            == 200
        )
        shutil.rmtree(root / "smollm2")
        wait_until(lambda: http.get("/v2/models/smollm2/ready").status_code == 404, timeout=60)
        assert http.post("/v2/repository/index").json() == []
    assert not marker.exists()
    assert not [path.name for path in modules_cache.rglob("configuration_x*")]
