"""KServe v2 routes with the engine double, checked with Triton's own HTTP client."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as triton_http
import uvicorn
from fastapi.testclient import TestClient
from tritonclient.utils import InferenceServerException

from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.repository import EXPLICIT_CONTROL, write_model
from tests.support.responses import Response

TWO_VERSIONS = (
    "version_policy: { all { } }\n"
    'parameters: { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }'
)


@pytest.fixture
def two_model_repo(tmp_path: Path) -> Path:
    root = tmp_path / "two"
    write_model(root, "alpha", "1", config=TWO_VERSIONS)
    write_model(root, "alpha", "2")
    write_model(root, "beta", "1")
    return root


@pytest.fixture
def engines() -> dict[str, FakeEngine]:
    return {}


@pytest.fixture
def triton(
    two_model_repo: Path, engines: dict[str, FakeEngine]
) -> Iterator[triton_http.InferenceServerClient]:
    """A real uvicorn server (alpha loaded, beta not) and tritonclient's HTTP client on it."""

    def factory(spec):
        engine = FakeEngine()
        engines[f"{spec.name}/{spec.version}"] = engine
        return engine

    app = create_app(
        Settings(model_repository=[two_model_repo], models=["alpha"], **EXPLICIT_CONTROL),
        engine_factory=factory,
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    client = triton_http.InferenceServerClient(f"127.0.0.1:{port}")
    yield client
    client.close()
    server.should_exit = True
    thread.join(timeout=10)


def test_tritonclient_health_and_metadata(triton: triton_http.InferenceServerClient) -> None:
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("alpha") and triton.is_model_ready("alpha", "1")
    assert not triton.is_model_ready("beta")
    server = triton.get_server_metadata()
    assert server["name"] == "triton-vllm-generate" and "generate" in server["extensions"]
    metadata = triton.get_model_metadata("alpha")
    assert metadata["versions"] == ["1", "2"] and metadata["platform"] == "vllm"
    inputs = {t["name"]: (t["datatype"], t["shape"]) for t in metadata["inputs"]}
    assert inputs["text_input"] == ("BYTES", [1]) and inputs["stream"] == ("BOOL", [1])
    outputs = {t["name"]: (t["datatype"], t["shape"]) for t in metadata["outputs"]}
    assert outputs["cumulative_logprob"] == ("FP32", [-1]) and outputs["num_input_tokens"] == (
        "UINT32",
        [1],
    )
    assert triton.get_model_metadata("alpha", "1")["versions"] == ["1"]


def test_tritonclient_model_config(triton: triton_http.InferenceServerClient) -> None:
    config = triton.get_model_config("alpha")
    assert config["name"] == "alpha" and config["backend"] == "vllm"
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert config["max_batch_size"] == 0
    assert {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]} in config["input"]
    assert config["parameters"]["REPORT_CUSTOM_METRICS"] == {"string_value": "true"}
    assert config["version_policy"] == {"all": {}}


def test_tritonclient_repository_index_load_unload(
    triton: triton_http.InferenceServerClient, engines: dict[str, FakeEngine]
) -> None:
    index = triton.get_model_repository_index()
    assert index == [
        {"name": "alpha", "version": "1", "state": "READY"},
        {"name": "alpha", "version": "2", "state": "READY"},
        {"name": "beta"},
    ]
    triton.load_model("beta")
    assert triton.is_model_ready("beta") and engines["beta/1"].started
    triton.unload_model("alpha")
    assert engines["alpha/1"].stopped and engines["alpha/2"].stopped
    assert not triton.is_model_ready("alpha")
    states = {
        (e["name"], e.get("version")): e["state"] for e in triton.get_model_repository_index()
    }
    assert states == {("alpha", None): "UNAVAILABLE", ("beta", "1"): "READY"}
    with pytest.raises(InferenceServerException, match="no such model"):
        triton.load_model("gamma")


def test_generate_after_unload_is_404_and_after_reload_works(
    make_client, two_model_repo: Path
) -> None:
    client: TestClient = make_client(FakeEngine(), two_model_repo, **EXPLICIT_CONTROL)
    assert client.post("/v2/repository/models/alpha/unload").status_code == 200
    response = client.post("/v2/models/alpha/generate", json={"text_input": "x"})
    assert response.status_code == 404 and "alpha" in response.json()["error"]
    assert client.post("/v2/repository/models/alpha/load").status_code == 200
    assert client.post("/v2/models/alpha/generate", json={"text_input": "x"}).status_code == 200


def test_ready_routes_for_unknown_model_and_version(client: TestClient) -> None:
    assert client.get("/v2/models/nope/ready").status_code == 404
    assert client.get("/v2/models/fake/versions/3/ready").status_code == 404
    assert client.get("/v2/models/fake/versions/1/ready").status_code == 200


def test_index_filters_ready_models(client: TestClient) -> None:
    response = client.post("/v2/repository/index", json={"ready": True})
    assert response.json() == [{"name": "fake", "version": "1", "state": "READY"}]


def test_unload_waits_for_running_requests(make_client, repository: Path) -> None:
    """A request admitted before the unload finishes; the engine stops only after it."""
    engine = FakeEngine(step_delay=0.05)
    client: TestClient = make_client(engine, **EXPLICIT_CONTROL)
    results: dict[str, Response] = {}

    def run() -> None:
        results["response"] = client.post(
            "/v2/models/fake/generate", json={"text_input": "x", "parameters": {"max_tokens": 10}}
        )

    worker = threading.Thread(target=run)
    worker.start()
    while not engine.active:
        time.sleep(0.01)
    assert client.post("/v2/repository/models/fake/unload").status_code == 200
    worker.join()
    response = results["response"]
    assert response.status_code == 200 and response.json()["text_output"].endswith(
        ".Hello from the fake"
    )
    assert engine.stopped


def test_multi_gpu_model_needs_kind_model(tmp_path: Path) -> None:
    write_model(
        tmp_path,
        "big",
        config="instance_group [ { kind: KIND_GPU } ]",
        model="x",
        tensor_parallel_size=2,
    )
    from app.errors import ModelConfigError

    with pytest.raises(ModelConfigError, match="KIND_MODEL"):
        create_app(Settings(model_repository=[tmp_path]), engine_factory=lambda spec: FakeEngine())
    (tmp_path / "big" / "config.pbtxt").write_text("instance_group [ { kind: KIND_MODEL } ]")
    create_app(Settings(model_repository=[tmp_path]), engine_factory=lambda spec: FakeEngine())


def test_images_reach_the_engine_decoded(make_client) -> None:
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (2, 3), "blue").save(buffer, format="PNG")
    engine = FakeEngine(supports_images=True)
    client: TestClient = make_client(engine)
    image = base64.b64encode(buffer.getvalue()).decode()
    assert (
        client.post(
            "/v2/models/fake/generate", json={"text_input": "x", "image": [image]}
        ).status_code
        == 200
    )
    assert engine.requests[-1].images[0].size == (2, 3)
    response = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "image": [image, "!!"]}
    )
    assert response.status_code == 400 and response.json()["error"].startswith("image.1:")
