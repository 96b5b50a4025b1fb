"""Start-up failures found before any engine loads, with the real program: a Hugging Face Hub
id missing from the cache while downloads are off."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_repository_real_engine import write_json
from tests.support.asgi import free_ports
from tests.support.servers import START_TIMEOUT_S
from tests.support.tritonserver import run_tritonserver

HUB_MODEL_JSON = {
    "model": "facebook/opt-125m",
    "disable_log_requests": True,
    "gpu_memory_utilization": 0.5,
    "enforce_eager": True,
}
"""The vLLM backend README's sample model.json: a Hugging Face Hub id."""


def test_a_hub_id_missing_from_the_cache_stops_the_start_in_one_line_while_offline(
    tmp_path: Path,
) -> None:
    """Downloads off (HF_HUB_OFFLINE=1, as the test sets it) and an empty Hub cache: one line
    says how to allow the download, and no engine starts. Nothing reaches the network."""
    write_json(tmp_path / "repository" / "vllm_model" / "1" / "model.json", HUB_MODEL_JSON)
    http, grpc, metrics = free_ports(3)
    refused = run_tritonserver(
        f"--model-repository={tmp_path / 'repository'}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hub-cache")},
        timeout=START_TIMEOUT_S,
    )
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert (
        "model 'facebook/opt-125m' is not in the local Hugging Face cache and downloads are off "
        "(HF_HUB_OFFLINE=1): set HF_HUB_OFFLINE=0 to download it, or give a local folder"
    ) in refused.stderr
    assert "error: creating server: Internal - failed to load all models" in refused.stderr
    assert "Traceback" not in refused.stderr and "starting engine" not in refused.stderr
