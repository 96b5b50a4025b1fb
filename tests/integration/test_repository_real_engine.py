"""Several models and versions, LoRA, load/unload and the Triton client against real engines.

One server for this module, on a temporary repository:
    alpha/1  smollm2 with LoRA enabled and one adapter made here with peft
    alpha/2  smollm2
    vllm_model/1  the backend's sample config.pbtxt and model.json (model pointed at smollm2);
                  not loaded at start, loaded and unloaded by the tests
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from app.paths import PROJECT_ROOT
from tests.support.servers import EXPLICIT_CONTROL_ENV, RunningServer, start_server
from tests.support.triton_grpc import by_id, stream_results, text_of, vllm_request

pytestmark = pytest.mark.usefixtures("several_engines")

MODEL_DIR = PROJECT_ROOT / ".cache" / "models" / "smollm2"
PROMPT = "What is Triton Inference Server?"
GREEDY = {"temperature": 0, "max_tokens": 24, "apply_chat_template": True}

SAMPLE_CONFIG = """
name: "vllm_model"
backend: "vllm"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_MODEL } ]
"""


def make_adapter(target: Path) -> None:
    """A rank-8 LoRA for smollm2 with random, non-zero weights (so it changes the output)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(MODEL_DIR)
    config = LoraConfig(
        r=8, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    get_peft_model(base, config).save_pretrained(str(target))


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def multi_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("repository")
    engine_args = {"model": str(MODEL_DIR), "enforce_eager": True, "max_model_len": 1024}
    write_json(
        root / "alpha" / "1" / "model.json",
        {**engine_args, "enable_lora": True, "max_lora_rank": 8},
    )
    write_json(root / "alpha" / "1" / "multi_lora.json", {"doc": "adapters/doc"})
    make_adapter(root / "alpha" / "1" / "adapters" / "doc")
    write_json(root / "alpha" / "2" / "model.json", engine_args)
    (root / "alpha" / "config.pbtxt").write_text("version_policy: { all { } }")
    sample = {
        "model": str(MODEL_DIR),
        "disable_log_requests": True,
        "gpu_memory_utilization": 0.5,
        "enforce_eager": True,
        "disable_log_stats": False,
    }
    write_json(root / "vllm_model" / "1" / "model.json", sample)
    (root / "vllm_model" / "config.pbtxt").write_text(SAMPLE_CONFIG)
    server = start_server(
        "--model-repository",
        str(root),
        "--models",
        "alpha",
        name="multi",
        env=EXPLICIT_CONTROL_ENV,
    )
    yield server
    _code, alive = server.stop(signal.SIGTERM)
    for process in alive:
        process.kill()
    assert not alive


@pytest.fixture(scope="module")
def triton(multi_server: RunningServer) -> Iterator[triton_http.InferenceServerClient]:
    client = triton_http.InferenceServerClient(
        multi_server.base_url.removeprefix("http://"), network_timeout=300
    )
    yield client
    client.close()


def generate(server: RunningServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=120)


def engine_cores(server: RunningServer) -> int:
    """Live (not exited) engine-core processes under the server."""
    count = 0
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "EngineCore" in child.name():
                count += 1
        except psutil.NoSuchProcess:
            pass
    return count


def test_two_versions_answer_by_route(multi_server: RunningServer) -> None:
    latest = generate(
        multi_server, "/v2/models/alpha/generate", {"text_input": PROMPT, "parameters": GREEDY}
    )
    first = generate(
        multi_server,
        "/v2/models/alpha/versions/1/generate",
        {"text_input": PROMPT, "parameters": GREEDY},
    )
    assert latest.status_code == first.status_code == 200
    assert latest.json()["model_version"] == "2" and first.json()["model_version"] == "1"
    assert latest.json()["text_output"] == first.json()["text_output"]  # same weights, greedy
    missing = generate(multi_server, "/v2/models/alpha/versions/3/generate", {"text_input": PROMPT})
    assert missing.status_code == 404 and "version 3" in missing.json()["error"]


def test_lora_adapter_changes_the_output(multi_server: RunningServer) -> None:
    path = "/v2/models/alpha/versions/1/generate"
    plain = generate(multi_server, path, {"text_input": PROMPT, "parameters": GREEDY}).json()[
        "text_output"
    ]
    adapted = generate(
        multi_server, path, {"text_input": PROMPT, "parameters": {**GREEDY, "lora_name": "doc"}}
    )
    assert adapted.status_code == 200, adapted.text
    assert adapted.json()["text_output"] != plain


def test_lora_errors_match_the_backend(multi_server: RunningServer) -> None:
    unknown = generate(
        multi_server,
        "/v2/models/alpha/versions/1/generate",
        {"text_input": "x", "parameters": {"lora_name": "nope"}},
    )
    assert unknown.status_code == 400
    assert unknown.json() == {"error": "LoRA nope is not supported, we currently support ['doc']"}
    disabled = generate(
        multi_server,
        "/v2/models/alpha/versions/2/generate",
        {"text_input": "x", "parameters": {"lora_name": "doc"}},
    )
    assert disabled.status_code == 400 and disabled.json() == {
        "error": "LoRA feature is not enabled."
    }


def test_tritonclient_against_real_engines(triton: triton_http.InferenceServerClient) -> None:
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("alpha", "1") and triton.is_model_ready("alpha", "2")
    assert triton.get_server_metadata()["extensions"] == [
        "model_repository",
        "model_configuration",
        "generate",
        "statistics",
        "trace",
        "logging",
    ]
    assert triton.get_model_metadata("alpha")["versions"] == ["1", "2"]
    assert triton.get_model_config("alpha")["model_transaction_policy"] == {"decoupled": True}
    index = {
        (e["name"], e.get("version")): e.get("state") for e in triton.get_model_repository_index()
    }
    # explicit control: a model never loaded is listed by name alone, as Triton lists it
    assert index == {("alpha", "1"): "READY", ("alpha", "2"): "READY", ("vllm_model", None): None}


def test_the_backend_sample_model_loads_over_http_and_unloads_over_grpc(
    multi_server: RunningServer, triton: triton_http.InferenceServerClient
) -> None:
    """Load and unload, one over each protocol (the security tests take the other way round:
    an unload over HTTP, a load over gRPC)."""
    cores_before = engine_cores(multi_server)
    triton.load_model("vllm_model")
    assert triton.is_model_ready("vllm_model")
    assert engine_cores(multi_server) == cores_before + 1
    config = triton.get_model_config("vllm_model")
    assert {i["name"] for i in config["input"]} >= {
        "text_input",
        "stream",
        "sampling_parameters",
        "image",
    }
    body = {
        "text_input": PROMPT,
        "parameters": {"max_tokens": 8, "ignore_eos": True},
        "return_num_output_tokens": True,
    }
    response = generate(multi_server, "/v2/models/vllm_model/generate", body)
    assert response.status_code == 200 and response.json()["num_output_tokens"] == 8
    request = vllm_request(
        PROMPT,
        "1",
        sampling_parameters={"max_tokens": "4", "ignore_eos": "true"},
        model_name="vllm_model",
        exclude_input_in_output=True,
    )
    with triton_grpc.InferenceServerClient(multi_server.grpc_url) as client:
        assert text_of(by_id(stream_results(client, [request]))["1"])
        assert client.get_inference_statistics("vllm_model").model_stats[0].inference_count == 2
        client.unload_model("vllm_model")
        assert not client.is_model_ready("vllm_model")
        [entry] = [m for m in client.get_model_repository_index().models if m.name == "vllm_model"]
        assert (entry.state, entry.reason) == ("UNAVAILABLE", "unloaded")
        [(_, error)] = stream_results(client, [request])
        assert error.message() == "Request for unknown model: 'vllm_model' is not found"
    assert not triton.is_model_ready("vllm_model")
    refused = generate(multi_server, "/v2/models/vllm_model/generate", {"text_input": "x"})
    assert refused.status_code == 404
    assert engine_cores(multi_server) == cores_before
    entry = next(e for e in triton.get_model_repository_index() if e["name"] == "vllm_model")
    assert entry == {"name": "vllm_model", "state": "UNAVAILABLE", "reason": "unloaded"}


def test_lora_over_grpc_and_inside_http_parameters_as_the_backend_ci(
    multi_server: RunningServer,
) -> None:
    """multi_lora/test.sh: over gRPC `lora_name` only in the sampling_parameters tensor; over
    HTTP `exclude_input_in_output` inside `parameters` (it is that input, not a parameter)."""
    sampling = {"temperature": "0", "top_p": "1", "max_tokens": "24", "apply_chat_template": "true"}
    lora = {**sampling, "lora_name": "doc"}
    with triton_grpc.InferenceServerClient(multi_server.grpc_url) as client:
        texts = {}
        for name, values in (
            ("doc", lora),
            ("plain", sampling),
        ):  # one at a time: a batch of one, as HTTP's
            request = vllm_request(
                PROMPT,
                name,
                sampling_parameters=values,
                model_name="alpha",
                exclude_input_in_output=True,
            )
            request["model_version"] = "1"
            request["parameters"] = sampling  # the CI sends the parameters without the LoRA
            texts[name] = text_of(by_id(stream_results(client, [request]))[name])
        unknown = vllm_request(
            "x", "u", sampling_parameters={"lora_name": "nope"}, model_name="alpha"
        )
        disabled = vllm_request(
            "x", "d", sampling_parameters={"lora_name": "doc"}, model_name="alpha"
        )
        unknown["model_version"], disabled["model_version"] = "1", "2"
        errors = {r[1].message() for r in stream_results(client, [unknown, disabled])}
    assert errors == {
        "LoRA nope is not supported, we currently support ['doc']",
        "LoRA feature is not enabled.",
    }
    assert texts["doc"] != texts["plain"] and not texts["doc"].startswith(PROMPT)
    body: dict[str, Any] = {
        "text_input": PROMPT,
        "parameters": {
            "stream": False,
            "temperature": 0,
            "top_p": 1,
            "max_tokens": 24,
            "apply_chat_template": True,
            "lora_name": "doc",
            "exclude_input_in_output": True,
        },
    }
    http = generate(multi_server, "/v2/models/alpha/versions/1/generate", body)
    assert http.status_code == 200, http.text
    assert http.json()["text_output"] == texts["doc"]
    body["parameters"]["lora_name"] = "nope"
    refused = generate(multi_server, "/v2/models/alpha/versions/1/generate", body).json()
    assert refused == {"error": "LoRA nope is not supported, we currently support ['doc']"}
