"""The GPU benchmark's tables and acceptance checks (bench/gpu/table.py), from made-up records."""

from __future__ import annotations

from typing import Any

from bench.gpu.table import checks, lone_request_checks, lone_request_profile, render


def record(
    target: str, c: int, tok_s: float, itl: float = 10.0, ttft: float = 50.0
) -> dict[str, Any]:
    return {
        "shape": "tiny",
        "target": target,
        "c": c,
        "tok_s": tok_s,
        "itl_p99_ms": itl,
        "ttft_p50_ms": ttft,
        "server_cpu_us_per_token": 140.0,
    }


def test_every_check_met_when_ours_leads_everywhere() -> None:
    records = [
        record("engine", 256, 1000),
        record("vllm1", 256, 500, itl=40, ttft=400),
        record("vllm2", 256, 900),
        record("ours2", 256, 950, itl=20, ttft=100),
        record("vllm1", 1, 100, itl=4, ttft=16),
        record("vllm2", 1, 100),
        record("ours2", 1, 101, itl=3, ttft=15),
    ]
    found = checks(records)
    assert len(found) == 9 and all(check.met for check in found)


def test_bounds_are_the_acceptance_ones() -> None:
    records = [
        record("engine", 256, 1000),
        record("vllm1", 256, 500),
        record("vllm4", 256, 900),
        record("ours4", 256, 899),
    ]
    by_what = {check.what: check for check in checks(records)}
    assert not by_what["tiny C=256 tok/s ours / vllm serve with 4 API processes"].met
    assert by_what["tiny C=256 tok/s ours / vllm serve"].bound == 1.8
    assert not by_what["tiny C=256 tok/s ours / engine in-process"].met  # 0.899 < 0.9


def test_a_failed_target_is_shown_missing_and_not_checked() -> None:
    records = [
        record("ours4", 64, 900),
        {"shape": "tiny", "target": "vllm4", "failed": "RuntimeError('exited')"},
    ]
    table = render(records)
    assert "| tiny | 64 | – | 900 | – | – | – | – | – |" in table
    assert "Checks: 0 of 0 met" in table


def test_rounds_are_averaged_and_profiled_levels_left_out() -> None:
    records = [
        record("vllm1", 256, 500),
        record("vllm1", 256, 700),
        {**record("vllm1", 256, 50), "round": "profile"},
        record("ours4", 256, 1000),
        {"shape": "tiny", "target": "ours4", "start_s": 80.0},
    ]
    table = render(records)
    assert "| tiny | 256 | vllm1 | 600 (500–700) |" in table
    assert "| tiny | 256 | ours4 | 1,000 |" in table
    by_what = {check.what: check for check in checks(records)}
    assert round(by_what["tiny C=256 tok/s ours / vllm serve"].ours, 3) == round(1000 / 600, 3)


def test_the_compared_process_count_is_one_both_servers_ran() -> None:
    records = [
        record("vllm1", 64, 100),
        record("vllm4", 64, 100),
        record("ours4", 64, 100),
        record("ours8", 64, 200),
    ]
    assert "ours, 4 processes" in render(records)


def test_the_summary_lists_only_the_checks_not_met() -> None:
    records = [record("vllm1", 64, 100), record("ours4", 64, 120, itl=20)]
    summary = render(records, detailed=False)
    assert (
        "Checks: 2 of 3 met\n\n"
        "- NOT met: tiny C=64 ITL p99 ms ours vs vllm serve: 20 (bound 10.0)\n"
    ) in summary
    assert "- met:" not in summary and "range over rounds" not in summary
    assert "- met: tiny C=64 tok/s ours / vllm serve: 1.2 (bound 1.0)" in render(records)


def test_the_null_comparison_takes_vllm_serve_as_the_bound() -> None:
    records = [
        record("vllm1", 1, 100, itl=4, ttft=16),
        record("vllm4", 1, 101, itl=5, ttft=15),
        record("ours4", 1, 99),
    ]
    found = {check.what: check.met for check in lone_request_checks(records, "vllm4")}
    assert found == {
        "tiny C=1 vllm4 tok/s / vllm serve": True,
        "tiny C=1 vllm4 ITL p99 ms vs vllm serve": False,
        "tiny C=1 vllm4 TTFT p50 ms vs vllm serve": True,
    }
    assert lone_request_checks(records, "vllm1") == [] and "2 of 3 met" in render(records)


def lone(
    target: str, tok_s: float, ttft: float, server: dict[str, float] | None = None
) -> dict[str, Any]:
    level = {
        **record(target, 1, tok_s, ttft=ttft),
        "interleaved": True,
        "round": 0,
        "ttft_mean_ms": ttft,
        "itl_mean_ms": 2.0,
        "e2e_mean_ms": 270.0,
    }
    return {**level, "server_ms": server} if server else level


def test_the_lone_request_profile_splits_ttft_between_the_frontend_and_the_engine() -> None:
    timings = {"ttft": 9.5, "queue": 0.1, "prefill": 6.0, "decode_per_token": 1.95, "e2e": 262.0}
    records = [
        lone("vllm1", 450, 14.0, timings),
        lone("ours4m", 455, 13.0, {**timings, "ttft": 9.0}),
        lone("ours4", 452, 13.5),
        record("vllm1", 256, 12000),
    ]
    lines = lone_request_profile(records)
    assert (
        "| tiny | vllm1 | 450 | 14.00 / 9.50 | 4.50 | 0.10 | 6.00 | 1.950 | 2.000 | 270.0 / 262.0 |"
        in lines
    )
    assert (
        "| tiny | ours4m | 455 | 13.00 / 9.00 | 4.00 | 0.10 | 6.00 "
        "| 1.950 | 2.000 | 270.0 / 262.0 |"
    ) in lines
    assert "| tiny | ours4 | 452 | 13.50 / – | – | – | – | – | 2.000 | 270.0 / – |" in lines
    assert lone_request_profile([lone("ours4", 452, 13.5)]) == []


def test_ours_with_the_vllm_metrics_on_is_checked_as_ours_is() -> None:
    records = [
        record("vllm1", 256, 10000),
        record("vllm4", 256, 20000),
        record("engine", 256, 22000),
        record("ours4", 256, 21000),
        record("ours4m", 256, 19000),
    ]
    assert all(check.met for check in checks(records))
    with_metrics = {check.what: check.met for check in checks(records, "ours4m")}
    assert with_metrics["tiny C=256 tok/s ours / vllm serve with 4 API processes"] is False
    table = render(records)
    assert "With the vllm: metrics on (ours4m): checks 3 of 5 met" in table
    assert "- tiny C=256: 19,000 tok/s, 0.90 × ours4 without them" in table


def test_ours_over_grpc_is_checked_as_ours_is_and_set_beside_ours_over_sse() -> None:
    records = [
        record("vllm1", 256, 10000),
        record("vllm4", 256, 20000),
        record("engine", 256, 22000),
        record("ours4", 256, 21000, ttft=45.0),
        record("ours4g", 256, 23100, itl=9.0, ttft=40.0),
    ]
    table = render(records)
    assert "Checks: 5 of 5 met" in table
    assert (
        "Over Triton's gRPC (ModelStreamInfer, a call per request) (ours4g): checks 5 of 5 met"
        in table
    )
    assert (
        "- tiny C=256: 23,100 tok/s, 1.10 × ours4; "
        "TTFT p50 40.0 ms (ours4 45.0), ITL p99 9.0 ms (ours4 10.0)" in table
    )
