"""Start-up with the real program: a Hugging Face Hub id missing from the cache while
downloads are off stops it before any engine loads; the shared server's log lists its ports
and Triton's options table, and holds no note about OpenAI's Triton compiler (its teardown
checks the exit: tests/integration/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import EXIT_NOISE
from tests.integration.test_repository_real_engine import write_json
from tests.support.asgi import free_ports
from tests.support.servers import START_TIMEOUT_S, RunningServer
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


def test_the_servers_log_lists_its_ports_and_options_without_compiler_notes(
    server: RunningServer,
) -> None:
    log = server.log_path.read_text(errors="replace")
    port = server.base_url.rsplit(":", 1)[1]
    assert f"ports: HTTP 127.0.0.1:{port}, gRPC {server.grpc_url}, metrics 127.0.0.1:" in log
    assert "| model_control_mode               | MODE_NONE" in log
    assert "| cache_enabled                    | 0" in log
    for noise in EXIT_NOISE:
        assert noise not in log
