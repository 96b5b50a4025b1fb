"""The benchmark clients users point at a Triton or vLLM server, run against the real server:
the blocks of docs/benchmarks/index.md as they are written there: `vllm bench serve` (its
OpenAI completions and chat backends), AIPerf and guidellm on `/v1`, genai-perf in Triton
mode and perf_analyzer on the gRPC stream. Each runs a short profile: no request
fails, and the tokens it reports are the tokens the server's own counters (vLLM's, on
/metrics) saw generated."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from tests.support.servers import RunningServer
from tests.support.third_party import (
    MODEL_DIR,
    Counters,
    counters,
    documented_blocks,
    flag,
    installed,
    missing,
    read_json,
    run_block,
)

RESULTS = Path("bench") / "results" / "clients"
"""Where the documented blocks write, under the folder they run in."""


def settled(server: RunningServer, before: Counters) -> Counters:
    """What the server counted since `before`, once its counters stop moving (vLLM records
    a request's figures when it finishes, a moment after its last response)."""
    time.sleep(0.5)
    return counters(server.base_url) - before


def skip_unless_runs(tool: Path) -> None:
    reason = missing(tool)
    if reason is not None:
        pytest.skip(reason)


def run_documented(tool: str, server: RunningServer, folder: Path) -> tuple[str, Counters]:
    """Run the docs' block for `tool` in `folder`; the block and what the server counted."""
    skip_unless_runs(installed(tool))
    block = documented_blocks()[tool]
    before = counters(server.base_url)
    run_block(block, server.base_url, server.grpc_url, folder)
    return block, settled(server, before)


def test_vllm_bench_serve(server: RunningServer, tmp_path: Path) -> None:
    """Both commands of the block: OpenAI's completions, then chats."""
    block, seen = run_documented("vllm", server, tmp_path)
    requests, tokens = flag(block, "--num-prompts"), flag(block, "--random-output-len")
    results = [
        read_json(tmp_path / RESULTS / name) for name in ("vllm-bench.json", "vllm-bench-chat.json")
    ]
    for result in results:
        assert (result["completed"], result["failed"]) == (requests, 0)
        assert result["total_output_tokens"] == requests * tokens
    assert seen.requests == 2 * requests
    assert seen.generated_tokens == sum(r["total_output_tokens"] for r in results)
    assert seen.prompt_tokens == sum(r["total_input_tokens"] for r in results)


def test_aiperf(server: RunningServer, tmp_path: Path) -> None:
    block, seen = run_documented("aiperf", server, tmp_path)
    requests, tokens = flag(block, "--request-count"), flag(block, "--prompt-output-tokens-mean")
    (export,) = (tmp_path / RESULTS / "aiperf").rglob("profile_export_aiperf.json")
    report = read_json(export)
    assert report["request_count"]["avg"] == requests == seen.requests
    assert report.get("error_request_count", {"avg": 0})["avg"] == 0
    assert report["output_token_count"]["avg"] * requests == seen.generated_tokens
    assert seen.generated_tokens == requests * tokens


def test_guidellm(server: RunningServer, tmp_path: Path) -> None:
    block, seen = run_documented("guidellm", server, tmp_path)
    requests, tokens = flag(block, "count="), flag(block, "output_tokens=")
    (benchmark,) = read_json(tmp_path / RESULTS / "guidellm.json")["benchmarks"]
    metrics = benchmark["metrics"]
    totals = metrics["request_totals"]
    assert (totals["successful"], totals["errored"]) == (requests, 0) == (seen.requests, 0)
    assert metrics["output_token_count"]["successful"]["total_sum"] == seen.generated_tokens
    assert seen.generated_tokens == requests * tokens
    assert metrics["prompt_token_count"]["successful"]["total_sum"] == seen.prompt_tokens


def test_genai_perf_triton_grpc(server: RunningServer, tmp_path: Path) -> None:
    block, seen = run_documented("genai-perf", server, tmp_path)
    requests, tokens = flag(block, "--request-count"), flag(block, "--output-tokens-mean")
    artifacts = tmp_path / RESULTS / "genai-perf"
    (export,) = artifacts.rglob("*_genai_perf.json")
    report = read_json(export)
    (raw,) = artifacts.rglob("profile_export.json")
    streams = [r["response_outputs"] for r in read_json(raw)["experiments"][0]["requests"]]
    assert report["request_count"]["avg"] == requests == seen.requests
    assert seen.generated_tokens == requests * tokens
    # a response per generated token, then the empty final one
    assert [len(responses) for responses in streams] == [tokens + 1] * requests
    # genai-perf counts the tokens of the text it received, encoded again: sampled tokens
    # ("I", "'", "d") may encode as fewer ("I", "'d"), so its count is that of our text
    texts = ["".join(r["text_output"] for r in responses) for responses in streams]
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    encoded = sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts)
    assert report["output_sequence_length"]["avg"] * requests == encoded


def exported_by_perf_analyzer(server: RunningServer, folder: Path) -> tuple[str, Counters, Any]:
    """Run perf_analyzer's block until its export is JSON (at most 3 runs, as the docs say:
    perf_analyzer 2.51 now and then writes an empty or cut-short export and exits 0)."""
    for attempt in range(3):
        attempt_folder = folder / str(attempt)
        attempt_folder.mkdir()
        block, seen = run_documented("perf_analyzer", server, attempt_folder)
        try:
            return block, seen, read_json(attempt_folder / RESULTS / "perf_analyzer.json")
        except json.JSONDecodeError:
            continue
    raise AssertionError("perf_analyzer wrote no JSON export in 3 runs")


def test_perf_analyzer_grpc_stream(server: RunningServer, tmp_path: Path) -> None:
    block, seen, export = exported_by_perf_analyzer(server, tmp_path)
    inputs = read_json(tmp_path / "0" / RESULTS / "inputs.json")["data"]
    (tokens,) = {json.loads(row["sampling_parameters"][0])["max_tokens"] for row in inputs}
    requests = [r for experiment in export["experiments"] for r in experiment["requests"]]
    assert len(requests) == seen.requests == flag(block, "--request-count")
    # one streamed response per token (or per few, when the loop coalesces), then the final one
    assert all(1 <= len(r["response_timestamps"]) <= tokens + 1 for r in requests)
    assert seen.generated_tokens == tokens * len(requests)
    # every output was asked for: the responses before the empty final one carry real values
    for request in requests:
        *outputs, _final = request["response_outputs"]
        assert sum(output["num_output_tokens"] for output in outputs) == tokens
        assert outputs[-1]["finish_reason"] == "length"


def test_the_documented_blocks_change_only_the_documented_ports() -> None:
    """The blocks name the server as `make serve` starts it; the tests swap those ports."""
    blocks = documented_blocks()
    assert sorted(blocks) == ["aiperf", "genai-perf", "guidellm", "perf_analyzer", "vllm"]
    for tool, block in blocks.items():
        assert re.search(r"localhost:800[01]", block), tool
        if tool != "vllm":
            assert "--tokenizer" not in block, "the launcher passes .cache/models/smollm2"
