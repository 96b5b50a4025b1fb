"""The benchmark clients users run against Triton and vLLM servers, as installed by `make test`
(`vllm bench serve` in our own environment; AIPerf, guidellm, genai-perf and perf_analyzer in
`.cache/clients`, their own virtual environment, as their pins clash with ours), and the
command blocks of docs/benchmarks/index.md that run them, run as they are written there."""

from __future__ import annotations

import json
import os
import re
import subprocess
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
VLLM = PROJECT_ROOT / ".venv" / "bin" / "vllm"
MODEL = "smollm2"
MODEL_DIR = PROJECT_ROOT / ".cache" / "models" / "smollm2"
LABELS = {"model": MODEL, "version": "1"}
TOOL_TIMEOUT_S = 420
"""One block's short run on a slow 2-core CPU, its tools' start-up included."""


def installed(tool: str) -> Path:
    """Where the documented block's `tool` is installed."""
    if tool == "vllm":
        return VLLM
    if tool == "perf_analyzer":
        return PERF_ANALYZER
    return CLIENTS / "bin" / tool


def missing(tool: Path) -> str | None:
    """Why `tool` cannot run here (not installed, a shared library missing), or None."""
    if not tool.exists():
        return f"{tool} is not installed: `make clients` (part of `make test`) installs it"
    if tool == PERF_ANALYZER:
        env = {**os.environ, "LD_LIBRARY_PATH": str(CUDA_RUNTIME)}
        result = subprocess.run(["ldd", str(tool)], capture_output=True, text=True, env=env)
        absent = [line.split()[0] for line in result.stdout.splitlines() if "not found" in line]
        if absent:
            return f"perf_analyzer needs shared libraries this machine lacks: {', '.join(absent)}"
    return None


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


CLIENT_DOC = PROJECT_ROOT / "docs" / "benchmarks" / "index.md"
START = "<!-- client commands: tests/integration/test_third_party_clients.py runs each block -->"
END = "<!-- end of client commands -->"
TOOL = re.compile(r"^(?:\.cache/clients/launch/|\.venv/bin/)([\w-]+) ", re.MULTILINE)
"""A documented command: a launcher of `make clients`, or vLLM's command from the server's
environment."""
DOCUMENTED_PORTS = {"http": "localhost:8000", "grpc": "localhost:8001"}


def documented_blocks(path: Path = CLIENT_DOC) -> dict[str, str]:
    """The bash blocks between the page's markers, by the tool each launches."""
    text = path.read_text()
    assert text.count(START) == 1 and text.count(END) == 1, f"{path} lost its markers"
    marked = text.split(START)[1].split(END)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```$", marked, re.MULTILINE | re.DOTALL)
    found = {}
    for block in blocks:
        tools = set(TOOL.findall(block))
        assert len(tools) == 1, f"a block of {path} launches one tool: {block}"
        found[tools.pop()] = block
    return found


def flag(block: str, pattern: str) -> int:
    """The number a block gives after `pattern` (a flag, or guidellm's `count=`)."""
    match = re.search(re.escape(pattern) + r"[ =]?(\d+)", block)
    assert match, f"no {pattern} in {block}"
    return int(match.group(1))


def run_block(block: str, base_url: str, grpc_url: str, cwd: Path) -> None:
    """Run a documented block with bash as a user would, in `cwd` (where `.cache` and `.venv`
    are this checkout's), against the test server: only the documented ports are changed."""
    urls = {"http": base_url.removeprefix("http://"), "grpc": grpc_url}
    for kind, documented in DOCUMENTED_PORTS.items():
        if documented in block:
            block = block.replace(documented, urls[kind])
    for folder in (".cache", ".venv"):
        (cwd / folder).symlink_to(PROJECT_ROOT / folder)
    log = cwd / "block.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "TERM": "dumb"}
    with log.open("w") as out:
        code = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            timeout=TOOL_TIMEOUT_S,
        ).returncode
    if code != 0:
        raise AssertionError(
            f"the block exited with {code}:\n{block}\n{log.read_text(errors='replace')[-3000:]}"
        )
