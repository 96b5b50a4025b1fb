"""The benchmark clients users run against Triton and vLLM servers, as installed by `make test`:
`vllm bench serve` from our own environment (vLLM's CLI), and AIPerf, guidellm, genai-perf and
perf_analyzer from `.cache/clients` (their own virtual environment: their pins clash with ours;
perf_analyzer is the binary of tritonclient's last wheel built for this glibc)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.paths import PROJECT_ROOT

CLIENTS = PROJECT_ROOT / ".cache" / "clients"
PERF_ANALYZER_HOME = CLIENTS / "perf-analyzer"
PERF_ANALYZER = PERF_ANALYZER_HOME / "bin" / "perf_analyzer"
CUDA_RUNTIME = PERF_ANALYZER_HOME / "nvidia" / "cuda_runtime" / "lib"
"""libcudart.so.12, which perf_analyzer links (it runs without a GPU)."""
MODEL = "smollm2"
MODEL_DIR = PROJECT_ROOT / ".cache" / "models" / "smollm2"
LABELS = {"model": MODEL, "version": "1"}
TOOL_TIMEOUT_S = 420
"""One tool's short run on a slow 2-core CPU, its start-up included."""
VLLM_CLI = "vllm.entrypoints.cli.main"
"""vLLM's own `vllm` command (with the CPU build, `make setup` makes its version resolvable)."""


def missing(tool: Path) -> str | None:
    """Why `tool` cannot run here (not installed, a shared library missing), or None."""
    if not tool.exists():
        return f"{tool} is not installed: `make clients` (part of `make test`) installs it"
    if tool == PERF_ANALYZER:
        result = subprocess.run(["ldd", str(tool)], capture_output=True, text=True, env=tool_env())
        absent = [line.split()[0] for line in result.stdout.splitlines() if "not found" in line]
        if absent:
            return f"perf_analyzer needs shared libraries this machine lacks: {', '.join(absent)}"
    return None


def client_tool(name: str) -> Path:
    return CLIENTS / "bin" / name


def tool_env(hub_offline: bool = True) -> dict[str, str]:
    """The tools' environment: perf_analyzer on the PATH with its CUDA runtime, and no model
    hub: offline, or (`hub_offline` False) a hub address nothing answers. AIPerf reads
    HF_HUB_OFFLINE as "load tokenizers from the hub's cache only", which refuses a folder."""
    path = os.pathsep.join(
        [str(PERF_ANALYZER.parent), str(CLIENTS / "bin"), os.environ.get("PATH", "")]
    )
    libraries = os.pathsep.join(
        filter(None, [str(CUDA_RUNTIME), os.environ.get("LD_LIBRARY_PATH")])
    )
    env = {
        **os.environ,
        "PATH": path,
        "LD_LIBRARY_PATH": libraries,
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    if hub_offline:
        return {**env, "HF_HUB_OFFLINE": "1"}
    env = {k: v for k, v in env.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return {**env, "HF_ENDPOINT": UNREACHABLE_HUB, "HF_HUB_DISABLE_TELEMETRY": "1"}


UNREACHABLE_HUB = "http://127.0.0.1:9"
"""The discard port: a hub request fails at once."""


def run_tool(argv: list[str], log: Path, cwd: Path | None = None, hub_offline: bool = True) -> None:
    """Run a tool to its end, its output in `log`; fail with the log's end if it fails."""
    with log.open("w") as out:
        code = subprocess.run(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=tool_env(hub_offline),
            timeout=TOOL_TIMEOUT_S,
        ).returncode
    if code != 0:
        raise AssertionError(
            f"{argv[0]} exited with {code}:\n{log.read_text(errors='replace')[-3000:]}"
        )


def vllm_bench_serve(*args: str) -> list[str]:
    return [sys.executable, "-m", VLLM_CLI, "bench", "serve", *args]


@dataclass(frozen=True)
class Counters:
    """The server's own count of what the model did: requests, prompt and generated tokens."""

    requests: float
    prompt_tokens: float
    generated_tokens: float

    def __sub__(self, other: Counters) -> Counters:
        return Counters(
            self.requests - other.requests,
            self.prompt_tokens - other.prompt_tokens,
            self.generated_tokens - other.generated_tokens,
        )


COUNTERS = (
    "vllm:e2e_request_latency_seconds_count",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)


def counters(base_url: str) -> Counters:
    """The model's finished requests (vLLM's end-to-end latency count) and token counters on
    the server's /metrics."""
    values = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(httpx.get(f"{base_url}/metrics", timeout=30).text):
        for sample in family.samples:
            if sample.name in values and all(sample.labels.get(k) == v for k, v in LABELS.items()):
                values[sample.name] += sample.value
    return Counters(*(values[name] for name in COUNTERS))


def read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def perf_analyzer_inputs(path: Path, prompts: list[str], max_tokens: int) -> Path:
    """perf_analyzer's --input-data for the vLLM backend, as genai-perf writes it: the
    prompt, streaming, the prompt excluded from the output, exactly `max_tokens` new tokens."""
    sampling = json.dumps({"max_tokens": max_tokens, "min_tokens": max_tokens})
    rows = [
        {
            "text_input": [prompt],
            "stream": [True],
            "exclude_input_in_output": [True],
            "sampling_parameters": [sampling],
        }
        for prompt in prompts
    ]
    path.write_text(json.dumps({"data": rows}))
    return path
