"""The GPU run's table and acceptance checks (bench/gpu/table.py), from the recorded H100 run
and from made-up records."""

from __future__ import annotations

from app.paths import PROJECT_ROOT
from bench.gpu.table import checks, load, render

RECORDED = PROJECT_ROOT / "bench" / "gpu" / "h100-2026-11-23.jsonl"


def record(target: str, c: int, tok_s: float, itl: float = 10.0, ttft: float = 50.0) -> dict:
    return {
        "shape": "tiny", "target": target, "c": c, "tok_s": tok_s, "itl_p99_ms": itl,
        "ttft_p50_ms": ttft, "server_cpu_us_per_token": 140.0,
    }


def test_the_recorded_h100_run_renders_as_the_readme_table() -> None:
    table = render(load(RECORDED))
    assert "| tiny | 256 | 29,661 | 24,007 | 14,194 | 24,585 | 1.69 | 0.98 | 0.81 |" in table
    assert "| 1b | 256 | 27,570 | 26,996 | 13,317 | 24,555 | 2.03 | 1.10 | 0.98 |" in table
    assert "Checks: 12 of 26 met" in table
    assert "- NOT met: tiny C=256 tok/s ours / vllm serve: 1.69 (bound 1.8)" in table
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert "| tiny | 256 | 29,661 | 24,007 | 14,194 | 24,585 | 1.69 | 0.98 | 0.81 |" in readme


def test_every_check_met_when_ours_leads_everywhere() -> None:
    records = [
        record("engine", 256, 1000), record("vllm1", 256, 500, itl=40, ttft=400),
        record("vllm2", 256, 900), record("ours2", 256, 950, itl=20, ttft=100),
        record("vllm1", 1, 100, itl=4, ttft=16), record("vllm2", 1, 100), record("ours2", 1, 101, itl=3, ttft=15),
    ]
    found = checks(records)
    assert len(found) == 9 and all(check.met for check in found)


def test_bounds_are_the_acceptance_ones() -> None:
    records = [record("engine", 256, 1000), record("vllm1", 256, 500), record("vllm4", 256, 900), record("ours4", 256, 899)]
    by_what = {check.what: check for check in checks(records)}
    assert not by_what["tiny C=256 tok/s ours / vllm serve with 4 API processes"].met
    assert by_what["tiny C=256 tok/s ours / vllm serve"].bound == 1.8
    assert not by_what["tiny C=256 tok/s ours / engine in-process"].met  # 0.899 < 0.9


def test_a_failed_target_is_shown_missing_and_not_checked() -> None:
    records = [record("ours4", 64, 900), {"shape": "tiny", "target": "vllm4", "failed": "RuntimeError('server exited')"}]
    table = render(records)
    assert "| tiny | 64 | – | 900 | – | – | – | – | – |" in table
    assert "Checks: 0 of 0 met" in table
