"""The benchmark clients users point at a Triton or vLLM server, run against the real server:
`vllm bench serve` (its OpenAI completions and chat backends) on `/v1`, AIPerf and guidellm on
`/v1`, genai-perf in Triton mode and perf_analyzer on the gRPC stream. Each runs a short
profile: no request fails, and the tokens it reports are the tokens the server's own
counters (vLLM's, on /metrics) saw generated."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.support.servers import RunningServer
from tests.support.third_party import (
    MODEL,
    MODEL_DIR,
    PERF_ANALYZER,
    Counters,
    client_tool,
    counters,
    missing,
    perf_analyzer_inputs,
    read_json,
    run_tool,
    vllm_bench_serve,
)

REQUESTS = 4
PROMPT_TOKENS = 32
NEW_TOKENS = 8


def settled(server: RunningServer, before: Counters) -> Counters:
    """What the server counted since `before`, once its counters stop moving (vLLM records
    a request's figures when it finishes, a moment after its last response)."""
    time.sleep(0.5)
    return counters(server.base_url) - before


def skip_unless_runs(tool: Path) -> None:
    reason = missing(tool)
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize(
    ("backend", "endpoint"),
    [("openai", "/v1/completions"), ("openai-chat", "/v1/chat/completions")],
)
def test_vllm_bench_serve(
    server: RunningServer, tmp_path: Path, backend: str, endpoint: str
) -> None:
    before = counters(server.base_url)
    run_tool(
        vllm_bench_serve(
            "--backend",
            backend,
            "--base-url",
            server.base_url,
            "--endpoint",
            endpoint,
            "--model",
            MODEL,
            "--tokenizer",
            str(MODEL_DIR),
            "--dataset-name",
            "random",
            "--random-input-len",
            str(PROMPT_TOKENS),
            "--random-output-len",
            str(NEW_TOKENS),
            "--num-prompts",
            str(REQUESTS),
            "--max-concurrency",
            "2",
            "--ignore-eos",
            "--ready-check-timeout-sec",
            "0",
            "--disable-tqdm",
            "--save-result",
            "--result-dir",
            str(tmp_path),
            "--result-filename",
            "result.json",
        ),
        tmp_path / "vllm-bench.log",
    )
    result = read_json(tmp_path / "result.json")
    seen = settled(server, before)
    assert (result["completed"], result["failed"]) == (REQUESTS, 0)
    assert result["total_output_tokens"] == REQUESTS * NEW_TOKENS == seen.generated_tokens
    assert result["total_input_tokens"] == seen.prompt_tokens
    assert seen.requests == REQUESTS


def test_aiperf(server: RunningServer, tmp_path: Path) -> None:
    aiperf = client_tool("aiperf")
    skip_unless_runs(aiperf)
    before = counters(server.base_url)
    run_tool(
        [
            str(aiperf),
            "profile",
            "--model",
            MODEL,
            "--url",
            server.base_url,
            "--endpoint-type",
            "completions",
            "--streaming",
            "--tokenizer",
            str(MODEL_DIR),
            "--request-count",
            str(REQUESTS),
            "--concurrency",
            "2",
            "--prompt-input-tokens-mean",
            str(PROMPT_TOKENS),
            "--prompt-input-tokens-stddev",
            "0",
            "--prompt-output-tokens-mean",
            str(NEW_TOKENS),
            "--prompt-output-tokens-stddev",
            "0",
            "--extra-inputs",
            "ignore_eos:true",
            "--use-server-token-count",
            "--no-server-metrics",
            "--no-gpu-telemetry",
            "--ui-type",
            "none",
            "--output-artifact-dir",
            str(tmp_path / "artifacts"),
        ],
        tmp_path / "aiperf.log",
        hub_offline=False,
    )
    (export,) = (tmp_path / "artifacts").rglob("profile_export_aiperf.json")
    report = read_json(export)
    seen = settled(server, before)
    assert report["request_count"]["avg"] == REQUESTS == seen.requests
    assert report.get("error_request_count", {"avg": 0})["avg"] == 0
    assert (
        report["output_token_count"]["avg"] * REQUESTS
        == seen.generated_tokens
        == REQUESTS * NEW_TOKENS
    )


def test_guidellm(server: RunningServer, tmp_path: Path) -> None:
    guidellm = client_tool("guidellm")
    skip_unless_runs(guidellm)
    scenario = {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": server.base_url,
                "model": MODEL,
                "request_format": "/v1/completions",
                "extras": {"body": {"ignore_eos": True}},
            },
            "profile": {"kind": "synchronous"},
            "data": [
                {
                    "kind": "synthetic_text",
                    "prompt_tokens": PROMPT_TOKENS,
                    "output_tokens": NEW_TOKENS,
                }
            ],
            "constraints": [{"kind": "max_requests", "count": REQUESTS}],
            "tokenizer": {"kind": "huggingface_auto", "model": str(MODEL_DIR)},
            "outputs": [{"kind": "json", "path": str(tmp_path / "benchmarks.json")}],
        }
    }
    (tmp_path / "scenario.json").write_text(json.dumps(scenario))
    before = counters(server.base_url)
    run_tool(
        [str(guidellm), "run", "--scenario", str(tmp_path / "scenario.json"), "--disable-progress"],
        tmp_path / "guidellm.log",
    )
    (benchmark,) = read_json(tmp_path / "benchmarks.json")["benchmarks"]
    seen = settled(server, before)
    totals = benchmark["metrics"]["output_token_count"]["successful"]
    requests = benchmark["metrics"]["request_totals"]
    assert (requests["successful"], requests["errored"]) == (REQUESTS, 0)
    assert totals["total_sum"] == seen.generated_tokens == REQUESTS * NEW_TOKENS


def test_genai_perf_triton_grpc(server: RunningServer, tmp_path: Path) -> None:
    genai_perf = client_tool("genai-perf")
    skip_unless_runs(genai_perf)
    skip_unless_runs(PERF_ANALYZER)
    before = counters(server.base_url)
    run_tool(
        [
            str(genai_perf),
            "profile",
            "-m",
            MODEL,
            "--endpoint-type",
            "kserve",
            "--backend",
            "vllm",
            "--url",
            server.grpc_url,
            "--streaming",
            "--tokenizer",
            str(MODEL_DIR),
            "--synthetic-input-tokens-mean",
            str(PROMPT_TOKENS),
            "--synthetic-input-tokens-stddev",
            "0",
            "--output-tokens-mean",
            str(NEW_TOKENS),
            "--output-tokens-mean-deterministic",
            "--num-dataset-entries",
            str(REQUESTS),
            "--request-count",
            str(REQUESTS),
            "--concurrency",
            "1",
            "--artifact-dir",
            str(tmp_path / "artifacts"),
        ],
        tmp_path / "genai-perf.log",
    )
    (export,) = (tmp_path / "artifacts").rglob("*_genai_perf.json")
    report = read_json(export)
    (raw,) = (tmp_path / "artifacts").rglob("profile_export.json")
    streams = [r["response_outputs"] for r in read_json(raw)["experiments"][0]["requests"]]
    seen = settled(server, before)
    assert report["request_count"]["avg"] == REQUESTS == seen.requests
    assert seen.generated_tokens == REQUESTS * NEW_TOKENS
    # a response per generated token, then the empty final one
    assert [len(responses) for responses in streams] == [NEW_TOKENS + 1] * REQUESTS
    # genai-perf counts the tokens of the text it received, encoded again: sampled tokens
    # ("I", "'", "d") may encode as fewer ("I", "'d"), so its count is that of our text
    texts = ["".join(r["text_output"] for r in responses) for responses in streams]
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    encoded = sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts)
    assert report["output_sequence_length"]["avg"] * REQUESTS == encoded


def test_perf_analyzer_grpc_stream(server: RunningServer, tmp_path: Path) -> None:
    skip_unless_runs(PERF_ANALYZER)
    prompts = [f"Write a short note number {n} about rivers." for n in range(REQUESTS)]
    inputs = perf_analyzer_inputs(tmp_path / "inputs.json", prompts, NEW_TOKENS)
    before = counters(server.base_url)
    run_tool(
        [
            str(PERF_ANALYZER),
            "-m",
            MODEL,
            "--async",
            "-i",
            "grpc",
            "--streaming",
            "-u",
            server.grpc_url,
            "--service-kind",
            "triton",
            "--input-data",
            str(inputs),
            "--concurrency-range",
            "1",
            "--request-count",
            str(REQUESTS),
            "--stability-percentage",
            "999",
            "--profile-export-file",
            str(tmp_path / "export.json"),
        ],
        tmp_path / "perf-analyzer.log",
    )
    export = read_json(tmp_path / "export.json")
    requests = [r for experiment in export["experiments"] for r in experiment["requests"]]
    seen = settled(server, before)
    assert len(requests) == seen.requests >= REQUESTS
    # one streamed response per token (or per few, when the loop coalesces), then the final one
    assert all(1 <= len(r["response_timestamps"]) <= NEW_TOKENS + 1 for r in requests)
    assert seen.generated_tokens == NEW_TOKENS * len(requests)
