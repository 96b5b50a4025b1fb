"""Secure by default, against the real engine: an upload that would run code in the server is
refused in every model control mode, over HTTP (JSON and text/plain) and gRPC; Triton's none
and explicit modes; restricted API groups; HTTPS and gRPC mutual TLS with a CA made here; a
load with 150,000 files refused without stalling the server.

The explicit-mode server of this module: a copy of the default repository plus `spare` (the
same model, never loaded), `--load-model smollm2`, the model-repository group restricted on
both protocols, HTTP over TLS and gRPC over mutual TLS."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from app.paths import PROJECT_ROOT
from tests.support.servers import RunningServer, start_server
from tests.support.tls import TestPki, make_pki
from tests.support.triton_grpc import by_id, stream_results, text_of, vllm_request

MODE_REFUSAL = "explicit model load / unload is not allowed if polling is enabled"
ADMIN = {"admin-key": "s3cret"}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "s3cret"}
LOAD = "/v2/repository/models/smollm2/load"
GREEDY = {"text_input": "Say hi", "parameters": {"temperature": 0, "max_tokens": 4}}


def code_upload(marker: Path, trust_remote_code: bool) -> dict[str, bytes]:
    """A model folder whose config names a Python file that, imported, writes `marker`."""
    model_json = {"model": "model", **({"trust_remote_code": True} if trust_remote_code else {})}
    config = {
        "model_type": "pwned",
        "architectures": ["LlamaForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_x.PwnedConfig"},
    }
    code = (
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('pwned')\n"
        "from transformers import PretrainedConfig\n\n\nclass PwnedConfig(PretrainedConfig):\n"
        "    model_type = 'pwned'\n"
    )
    return {
        "file:1/model.json": json.dumps(model_json).encode(),
        "file:1/model/config.json": json.dumps(config).encode(),
        "file:1/model/configuration_x.py": code.encode(),
    }


def http_body(files: dict[str, bytes]) -> dict[str, object]:
    encoded = {key: base64.b64encode(content).decode() for key, content in files.items()}
    return {"parameters": {"config": json.dumps({"backend": "vllm"}), **encoded}}


def grpc_refusal(call: Callable[..., object], *args: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as refused:
        call(*args, **kwargs)
    return refused.value.status(), refused.value.message()


def test_none_mode_refuses_load_unload_and_the_code_upload(
    server: RunningServer, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    with (
        httpx.Client(base_url=server.base_url, timeout=60) as http,
        triton_grpc.InferenceServerClient(server.grpc_url) as grpc_client,
    ):
        for trust in (True, False):
            files = code_upload(marker, trust)
            response = http.post(LOAD, json=http_body(files))
            assert (response.status_code, response.json()) == (503, {"error": MODE_REFUSAL})
            text = http.post(
                LOAD, content=json.dumps(http_body(files)), headers={"Content-Type": "text/plain"}
            )
            assert text.status_code == 415
            config = json.dumps({"backend": "vllm"})
            assert grpc_refusal(grpc_client.load_model, "smollm2", config=config, files=files) == (
                "StatusCode.UNAVAILABLE",
                MODE_REFUSAL,
            )
        assert http.post("/v2/repository/models/smollm2/unload").status_code == 503
        assert grpc_refusal(grpc_client.unload_model, "smollm2") == (
            "StatusCode.UNAVAILABLE",
            MODE_REFUSAL,
        )
        assert http.get("/v2/models/smollm2/ready").status_code == 200
        assert http.post("/v2/models/smollm2/generate", json=GREEDY).status_code == 200
    assert not marker.exists()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def modules_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-modules")


@pytest.fixture(scope="module")
def secure(
    tmp_path_factory: pytest.TempPathFactory, pki: TestPki, modules_cache: Path
) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("repository")
    for name in ("smollm2", "spare"):
        shutil.copytree(PROJECT_ROOT / "configs" / "model_repository" / "smollm2", root / name)
    env = {
        "MODEL_CONTROL_MODE": "explicit",
        "LOAD_MODEL": '["smollm2"]',
        "HTTP_RESTRICTED_API": "model-repository:admin-key=s3cret",
        "GRPC_RESTRICTED_PROTOCOL": "model-repository:admin-key=s3cret",
        "HTTP_SSL_CERTFILE": str(pki.server_cert),
        "HTTP_SSL_KEYFILE": str(pki.server_key),
        "GRPC_USE_SSL": "true",
        "GRPC_USE_SSL_MUTUAL": "true",
        "GRPC_SERVER_CERT": str(pki.server_cert),
        "GRPC_SERVER_KEY": str(pki.server_key),
        "GRPC_ROOT_CERT": str(pki.ca_cert),
        "HF_MODULES_CACHE": str(modules_cache),
    }
    server = start_server(
        "--model-repository", str(root), name="secure", env=env, tls=server_trust(pki)
    )
    yield server
    code, alive = server.stop()
    for process in alive:
        process.kill()
    assert code == 0, server.log_tail()


def server_trust(pki: TestPki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca_cert))


@pytest.fixture
def https(secure: RunningServer, pki: TestPki) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=secure.base_url, verify=server_trust(pki), timeout=300) as client:
        yield client


@pytest.fixture
def grpc_client(secure: RunningServer, pki: TestPki) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(
        secure.grpc_url,
        ssl=True,
        root_certificates=str(pki.ca_cert),
        private_key=str(pki.client_key),
        certificate_chain=str(pki.client_cert),
    ) as client:
        yield client


def test_explicit_mode_loads_only_the_chosen_model(https: httpx.Client) -> None:
    index = https.post("/v2/repository/index", headers=ADMIN)
    assert index.json() == [
        {"name": "smollm2", "version": "1", "state": "READY"},
        {"name": "spare"},
    ]
    assert https.get("/v2/models/spare/ready").status_code == 404


def test_the_repository_group_is_restricted_on_both_protocols(
    https: httpx.Client, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    refused = https.post("/v2/repository/index")
    assert (refused.status_code, refused.json()) == (
        403,
        {"error": "This API is restricted, expecting header 'admin-key'"},
    )
    assert grpc_refusal(grpc_client.get_model_repository_index) == (
        "StatusCode.UNAVAILABLE",
        "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'",
    )
    assert [m.name for m in grpc_client.get_model_repository_index(headers=GRPC_ADMIN).models] == [
        "smollm2",
        "spare",
    ]
    assert https.post("/v2/models/smollm2/generate", json=GREEDY).status_code == 200


def test_the_code_upload_is_refused_and_never_runs(
    https: httpx.Client,
    grpc_client: triton_grpc.InferenceServerClient,
    tmp_path: Path,
    modules_cache: Path,
) -> None:
    marker = tmp_path / "pwned"
    trusted = code_upload(marker, trust_remote_code=True)
    response = https.post(LOAD, json=http_body(trusted), headers=ADMIN)
    assert response.status_code == 400 and "'trust_remote_code'" in response.json()["error"]
    text = https.post(
        LOAD,
        content=json.dumps(http_body(trusted)),
        headers={**ADMIN, "Content-Type": "text/plain"},
    )
    assert text.status_code == 415
    code, message = grpc_refusal(
        grpc_client.load_model,
        "smollm2",
        config='{"backend": "vllm"}',
        files=trusted,
        headers=GRPC_ADMIN,
    )
    assert code == "StatusCode.INVALID_ARGUMENT" and "'trust_remote_code'" in message
    untrusted = https.post(
        LOAD, json=http_body(code_upload(marker, trust_remote_code=False)), headers=ADMIN
    )
    assert untrusted.status_code == 400
    assert (
        "/tmp" not in untrusted.json()["error"]
        and "model-override" not in untrusted.json()["error"]
    )
    assert not marker.exists()
    assert not [path.name for path in modules_cache.rglob("configuration_x*")]
    assert https.get("/v2/models/smollm2/ready").status_code == 200


def test_150000_override_files_are_refused_without_stalling_the_server(https: httpx.Client) -> None:
    body = json.dumps(
        {"parameters": {"config": "{}", **{f"file:1/f{i}": "" for i in range(150_000)}}}
    )
    slowest = [0.0]
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            started = time.perf_counter()
            assert https.get("/v2/health/ready").status_code == 200
            slowest[0] = max(slowest[0], time.perf_counter() - started)
            time.sleep(0.005)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        time.sleep(0.2)
        response = https.post(
            LOAD, content=body, headers={**ADMIN, "Content-Type": "application/json"}
        )
    finally:
        time.sleep(0.2)
        done.set()
        prober.join()
    assert response.status_code == 400 and "'file:' overrides" in response.json()["error"]
    assert slowest[0] < 0.1, f"a readiness check took {slowest[0] * 1000:.0f} ms meanwhile"


def test_every_client_speaks_tls(
    secure: RunningServer, pki: TestPki, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    triton = triton_http.InferenceServerClient(
        secure.base_url.removeprefix("https://"),
        ssl=True,
        ssl_context_factory=lambda: server_trust(pki),
    )
    assert (
        triton.is_model_ready("smollm2")
        and triton.get_model_metadata("smollm2")["name"] == "smollm2"
    )
    request = vllm_request(
        "Say hi",
        "tls",
        sampling_parameters={"max_tokens": 4, "temperature": 0},
        model_name="smollm2",
    )
    (results,) = by_id(stream_results(grpc_client, [request])).values()
    assert text_of(results)
    with openai.OpenAI(
        base_url=f"{secure.base_url}/v1",
        api_key="none",
        http_client=openai.DefaultHttpxClient(verify=server_trust(pki)),
    ) as sdk:
        completion = sdk.completions.create(
            model="smollm2", prompt="Say hi", max_tokens=4, temperature=0
        )
    assert completion.usage is not None and completion.usage.completion_tokens == 4
    assert completion.choices[0].text
    with pytest.raises(InferenceServerException):
        triton_grpc.InferenceServerClient(
            secure.grpc_url, ssl=True, root_certificates=str(pki.ca_cert)
        ).is_server_live()


def test_explicit_load_and_unload_work(
    https: httpx.Client, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    assert https.post("/v2/repository/models/smollm2/unload", headers=ADMIN).status_code == 200
    assert https.get("/v2/models/smollm2/ready").status_code == 404
    grpc_client.load_model("smollm2", headers=GRPC_ADMIN)
    assert https.get("/v2/models/smollm2/ready").status_code == 200
    assert https.post("/v2/models/smollm2/generate", json=GREEDY).json()["text_output"]
