"""The benchmark's own code: figures from records, vLLM flags, a tiny micro-benchmark run, and
the results page generated from the recorded runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import runs
from bench.__main__ import main
from bench.stats import LevelStats, ratios, summarize
from bench.targets import vllm_cli_flags
from bench.workload import LevelRun, RequestRecord


def record(start: float, times: list[float], error: str | None = None) -> RequestRecord:
    return RequestRecord(
        start=start, times=times, counts=[1] * len(times), end=times[-1], error=error
    )


def test_summarize_computes_throughput_ttft_and_inter_token_latency() -> None:
    run = LevelRun(
        concurrency=2,
        records=[
            record(0.0, [0.1, 0.2, 0.3]),
            record(0.0, [0.3, 0.5, 0.7]),
            record(1.0, [1.5], "boom"),
        ],
        seconds=2.0,
    )
    stats = summarize("ours", run)
    assert (stats.requests, stats.errors, stats.output_tokens) == (3, 1, 7)
    assert stats.tokens_per_s == 3.5 and stats.requests_per_s == 1.0
    assert stats.ttft_ms_p50 == pytest.approx(200.0)
    assert stats.itl_ms_p50 == pytest.approx(150.0) and stats.itl_ms_p99 == pytest.approx(200.0)
    assert stats.first_error == "boom"


def level(target: str, c: int, tps: float, ttft: float) -> LevelStats:
    return LevelStats(target, c, 10, 0, 640, 1.0, tps, 1.0, ttft, ttft, 1.0, 1.0)


def test_ratios_compare_ours_with_each_other_target() -> None:
    found = ratios(
        [level("engine", 1, 50, 30), level("ours", 1, 45, 33), level("vllm-openai", 1, 30, 60)]
    )
    by = {r.versus: r for r in found}
    assert by["engine"].tokens_per_s == 0.9 and by["engine"].ttft_p50_delta_ms == 3.0
    assert by["vllm-openai"].tokens_per_s == 1.5 and by["vllm-openai"].ttft_p50 == 0.55


def test_engine_args_become_vllm_server_flags() -> None:
    flags = vllm_cli_flags(
        {
            "max_model_len": 2048,
            "enforce_eager": True,
            "disable_log_stats": False,
            "served_model_name": "smollm2",
            "enable_prefix_caching": False,
        }
    )
    assert flags == [
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--served-model-name",
        "smollm2",
        "--no-enable-prefix-caching",
    ]


def test_micro_benchmark_smoke(tmp_path: Path) -> None:
    """Our app under uvicorn with the engine double, two tiny levels."""
    code = main(
        [
            "--targets",
            "micro",
            "--micro-concurrency",
            "1",
            "4",
            "--micro-requests",
            "8",
            "-n",
            "4",
            "--out",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert code == 0
    [path] = tmp_path.glob("bench-*.json")
    micro = json.loads(path.read_text())["micro"]
    assert [m["concurrency"] for m in micro] == [1, 4]
    for m in micro:
        assert m["errors"] == 0 and m["requests"] == 8 and m["events"] == 32
        # CPU times tick in 10 ms steps: a level this small may read as zero.
        assert m["events_per_s"] > 0 and m["server_us_per_event"] >= 0


def test_micro_benchmark_over_grpc_smoke(tmp_path: Path) -> None:
    """The same app with its gRPC frontend: one ModelStreamInfer response per token."""
    code = main(
        [
            "--targets",
            "micro-grpc",
            "--micro-concurrency",
            "1",
            "4",
            "--micro-requests",
            "8",
            "-n",
            "4",
            "--out",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert code == 0
    [path] = tmp_path.glob("bench-*.json")
    micro = json.loads(path.read_text())["micro"]
    assert [(m["protocol"], m["concurrency"], m["errors"], m["events"]) for m in micro] == [
        ("grpc", 1, 0, 32),
        ("grpc", 4, 0, 32),
    ]


def test_paired_rounds_alternate_and_cover_every_request() -> None:
    from bench.paired import merged, round_sizes

    assert (
        round_sizes(8) == [2, 2, 2, 2] and round_sizes(10) == [3, 3, 2, 2] and round_sizes(1) == [1]
    )
    runs = [LevelRun(2, [record(0.0, [0.1])], 1.5), LevelRun(2, [record(0.0, [0.2])], 2.5)]
    assert merged(2, runs).seconds == 4.0 and len(merged(2, runs).records) == 2


def test_grpc_vs_sse_ratios() -> None:
    from bench.stats import protocol_ratios

    [ratio] = protocol_ratios([level("ours", 16, 100, 40), level("ours-grpc", 16, 110, 30)])
    assert (ratio.concurrency, ratio.versus, ratio.tokens_per_s, ratio.ttft_p50_delta_ms) == (
        16,
        "ours",
        1.1,
        -10.0,
    )


def test_every_recorded_run_says_what_ran_where_and_holds_its_results() -> None:
    recorded = runs.recorded_runs()
    assert recorded
    for run in recorded:
        assert {
            "title",
            "date",
            "sequence",
            "kind",
            "machine",
            "software",
            "commit",
            "command",
            "about",
        } <= set(run.meta)
        assert run.folder.name.startswith(run.meta["date"])
        assert run.meta["command"].startswith(("make bench", "python -m bench"))
        json_kinds = ("cpu", "cpu-reliability")
        results = run.cpu_results if run.meta["kind"] in json_kinds else run.gpu_results
        assert results.stat().st_size > 0, run.folder


def write_run(root: Path, name: str, sequence: int, records: list[dict[str, Any]]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    meta = {
        "title": name,
        "date": name[:10],
        "sequence": sequence,
        "kind": "gpu",
        "machine": "m",
        "software": "s",
        "commit": "abc1234",
        "command": "make bench",
        "about": f"about {name}",
    }
    (folder / "run.json").write_text(json.dumps(meta))
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_page_lists_runs_newest_first_with_their_tables(tmp_path: Path) -> None:
    def lone(target: str, tok_s: float) -> dict[str, Any]:
        return {
            "shape": "tiny",
            "target": target,
            "c": 1,
            "tok_s": tok_s,
            "itl_p99_ms": 4.0,
            "ttft_p50_ms": 15.0,
            "server_cpu_us_per_token": 3000.0,
        }

    write_run(
        tmp_path,
        "2026-01-02-h100-early",
        1,
        [lone("vllm1", 100), lone("vllm4", 99), lone("ours4", 101)],
    )
    write_run(tmp_path, "2026-01-02-h100-late", 2, [lone("vllm1", 100), lone("ours4", 99)])
    write_run(tmp_path, "2026-01-01-h100-old", 9, [lone("vllm1", 100), lone("ours4", 100)])
    text = runs.page(tmp_path)
    order = [
        text.index(f"### {day}: {name}")
        for day, name in (
            ("2026-01-02", "2026-01-02-h100-late"),
            ("2026-01-02", "2026-01-02-h100-early"),
            ("2026-01-01", "2026-01-01-h100-old"),
        )
    ]
    assert order == sorted(order)
    assert "| tiny | 1 | – | 101 | 100 | 99 | 1.01 | 1.02 | – |" in text
    assert "- Command: `make bench`" in text and "about 2026-01-02-h100-late" in text
    # ours met 3 + 2 + 3 of the 9 lone-request checks; vllm serve with 4 API processes 2 of 3
    assert (
        "ours met them 8 of 9 times" in text
        and "4 API processes (the same code as with one" in text
    )
    assert "2 of 3 times" in text
