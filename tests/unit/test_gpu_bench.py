"""The GPU run's table and acceptance checks (bench/gpu/table.py), from the recorded H100 run
and from made-up records."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import pytest

from app.paths import PROJECT_ROOT
from bench.gpu.engine import EngineSession
from bench.gpu.run import rotated
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


TOGETHER = PROJECT_ROOT / "bench" / "gpu" / "h100-2026-11-23-together.jsonl"


def test_the_run_of_every_server_together_renders_as_the_readme_table() -> None:
    table = render(load(TOGETHER))
    row = "| tiny | 256 | 24,550 | 22,626 | 12,346 | 17,887 | 1.83 | 1.26 | 0.92 |"
    assert row in table
    assert "| 1b | 256 | 23,319 | 23,055 | 11,049 | 21,638 | 2.09 | 1.07 | 0.99 |" in table
    assert "| tiny | 256 | ours4 | 22,626 (22,463–22,788) |" in table
    assert "Checks: 18 of 26 met" in table
    assert row in (PROJECT_ROOT / "README.md").read_text()


def test_rounds_are_averaged_and_profiled_levels_left_out() -> None:
    records = [
        record("vllm1", 256, 500), record("vllm1", 256, 700),
        {**record("vllm1", 256, 50), "round": "profile"},
        record("ours4", 256, 1000), {"shape": "tiny", "target": "ours4", "start_s": 80.0},
    ]
    table = render(records)
    assert "| tiny | 256 | vllm1 | 600 (500–700) |" in table
    assert "| tiny | 256 | ours4 | 1,000 |" in table
    by_what = {check.what: check for check in checks(records)}
    assert round(by_what["tiny C=256 tok/s ours / vllm serve"].ours, 3) == round(1000 / 600, 3)


def test_the_compared_process_count_is_one_both_servers_ran() -> None:
    records = [record("vllm1", 64, 100), record("vllm4", 64, 100), record("ours4", 64, 100), record("ours8", 64, 200)]
    assert "ours, 4 processes" in render(records)
    assert rotated(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert rotated(["a", "b", "c"], 4) == ["b", "c", "a"]


FAKE_ENGINE_LOADGEN = """
import json, os, sys
raw = sys.argv[sys.argv.index("--raw") + 1]
if "--fail" in sys.argv:
    sys.exit(1)
open(raw + ".ready", "w").close()
for line in sys.stdin:
    tag = line.strip()
    json.dump([{"c": 1, "tok_s": 10.0, "tag": tag}], open(raw + "." + tag + ".json", "w"))
"""


def fake_engine(tmp_path: Path, *extra: str) -> EngineSession:
    script = tmp_path / "fake_loadgen.py"
    script.write_text(FAKE_ENGINE_LOADGEN)
    raw = tmp_path / "tiny-engine"
    return EngineSession.start([sys.executable, str(script), "--raw", str(raw), *extra], raw, tmp_path / "engine.log")


def test_the_engine_of_a_together_run_is_kept_for_every_round(tmp_path: Path) -> None:
    engine = fake_engine(tmp_path)
    assert engine.wait_ready(timeout=30) < 30
    assert engine.round("r0", timeout=30) == [{"c": 1, "tok_s": 10.0, "tag": "r0"}]
    assert engine.round("r1", timeout=30)[0]["tag"] == "r1"
    engine.stop()
    assert engine.process.returncode == 0


def test_an_engine_that_did_not_start_is_reported_and_gives_no_rounds(tmp_path: Path) -> None:
    engine = fake_engine(tmp_path, "--fail")
    with pytest.raises(RuntimeError, match="did not start"):
        engine.wait_ready(timeout=30)
    assert engine.round("r0", timeout=30) == []
    engine.stop()


async def test_the_load_generator_runs_every_level_for_each_tag_on_stdin(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen

    async def one_request(wid: int, out: dict, count: int, tag: str) -> None:
        for _ in range(count):
            out["ttft"].append(0.01)
            out["itl"].extend([0.002] * 3)
            out["e2e"].append(0.02)
            out["events"] += 4
            out["done"] += 1

    args = argparse.Namespace(raw=str(tmp_path / "tiny-engine"), tokens=4, wid_base=0, target="engine")
    monkeypatch.setattr(sys, "stdin", io.StringIO("r0\nr1\n"))
    await loadgen.engine_rounds(None, one_request, [(1, 2), (4, 1)], args)
    assert (tmp_path / "tiny-engine.ready").exists()
    for tag in ("r0", "r1"):
        levels = json.loads((tmp_path / f"tiny-engine.{tag}.json").read_text())
        assert [(level["c"], level["requests"]) for level in levels] == [(1, 2), (4, 4)]
        assert all(set(level["server_cpu_s"]) == {"engine core"} for level in levels)


def test_the_runs_with_the_engine_in_every_round_render_as_the_readme_table() -> None:
    tiny = render(load(PROJECT_ROOT / "bench" / "gpu" / "h100-2026-11-24-tiny.jsonl"))
    big = render(load(PROJECT_ROOT / "bench" / "gpu" / "h100-2026-11-24-1b.jsonl"))
    readme = (PROJECT_ROOT / "README.md").read_text()
    rows = [
        "| tiny | 256 | 25,320 | 24,329 | 11,536 | 18,721 | 2.11 | 1.30 | 0.96 |",
        "| 1b | 256 | 27,148 | 28,028 | 12,765 | 24,708 | 2.20 | 1.13 | 1.03 |",
    ]
    assert rows[0] in tiny and rows[1] in big
    assert all(row in readme for row in rows)
    assert "| tiny | 256 | engine | 25,320 (24,416–26,175) |" in tiny
    assert "Checks: 10 of 13 met" in tiny and "Checks: 13 of 13 met" in big


def test_the_slowest_token_gaps_are_told_by_their_place_in_the_request() -> None:
    from bench.gpu import levels as run

    first_gap_slow = {"t_start": 0.0, "t_end": 1.0, "ttft": [0.01] * 4, "done": 4, "errors": 0,
                      "itl": [0.009, 0.002, 0.002, 0.002] * 25 * 4, "itl_pos": [0, 1, 2, 70] * 25 * 4}
    steady = {**first_gap_slow, "itl": [0.002, 0.002, 0.002, 0.009] * 25 * 4}
    merged = run.merged(1, [first_gap_slow, steady], 1.0, [{}], {}, 128)
    assert merged["slow_itl_at"] == {"0": 100, "1": 0, "2-7": 0, "8-63": 0, "64+": 100}
    assert run.merged(1, [{**steady, "itl_pos": []}], 1.0, [{}], {}, 128)["slow_itl_at"] == {}


def test_the_engine_starts_alongside_the_servers_after_the_first(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import run

    events: list[str] = []
    monkeypatch.setattr(run.time, "sleep", lambda seconds: events.append(f"wait {seconds}"))

    def launch(target: str, *args, **kwargs) -> run.Server:
        events.append(f"launch {target}")
        return run.Server(target, None, 0, target, "triton")  # type: ignore[arg-type]

    def ready(url: str, process, start: float) -> float:
        events.append(f"ready {url}")
        return 1.0

    monkeypatch.setattr(run, "start_server", launch)
    monkeypatch.setattr(run, "wait_ready", ready)
    monkeypatch.setattr(run.Run, "launch_engine", lambda self, shape, args: events.append("launch engine") or "engine")
    monkeypatch.setattr(run.Run, "wait_engine", lambda self, shape, engine: events.append("ready engine") or engine)
    bench = run.Run(tmp_path, tmp_path, tmp_path, [(1, 1, 1)], 4)
    servers, engine = bench.start_all("tiny", ["vllm1", "vllm4", "ours4"], {}, with_engine=True)
    gap = f"wait {run.LAUNCH_GAP}"  # engines launched at one moment can race for a port
    assert events == ["launch vllm1", "ready vllm1", "launch vllm4", gap, "launch ours4", gap, "launch engine",
                      "ready vllm4", "ready ours4", "ready engine"]
    assert list(servers) == ["vllm1", "vllm4", "ours4"] and engine == "engine"


def test_the_engine_start_time_counts_from_its_launch(tmp_path: Path) -> None:
    engine = fake_engine(tmp_path)
    engine.launched -= 5.0  # launched 5 s ago, waited for only now (after the servers)
    assert engine.wait_ready(timeout=30) >= 5.0
    engine.stop()


def test_a_profiled_run_records_the_engine_during_one_more_round(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import run

    recorded: list[tuple[int, Path]] = []
    monkeypatch.setattr(run, "record_profiles", lambda pid, out, settle: recorded.append((pid, out)) or [])
    engine = fake_engine(tmp_path)
    engine.wait_ready(timeout=30)
    bench = run.Run(tmp_path, tmp_path, tmp_path, [(256, 1, 8)], 4)
    bench.profile_engine("tiny", engine)
    engine.stop()
    assert recorded == [(engine.process.pid, tmp_path / "profiles" / "tiny-engine")]
    rows = [json.loads(line) for line in bench.results.read_text().splitlines()]
    assert rows == [{"shape": "tiny", "target": "engine", "round": "profile", "c": 1, "tok_s": 10.0, "tag": "profile"}]


def test_the_runs_of_both_shapes_in_one_session_render_as_the_readme_tables() -> None:
    readme = (PROJECT_ROOT / "README.md").read_text()
    expected = {
        "both-1": ("| 1b | 256 | 30,183 | 25,411 | 13,990 | 26,699 | 1.82 | 0.95 | 0.84 |", "Checks: 21 of 26 met"),
        "both-2": ("| tiny | 256 | 25,122 | 24,048 | 11,243 | 20,260 | 2.14 | 1.19 | 0.96 |", "Checks: 19 of 26 met"),
        "profile": ("| 1b | 256 | 31,763 | 28,979 | – | 28,854 | – | 1.00 | 0.91 |", "Checks: 2 of 2 met"),
    }
    for name, (row, verdict) in expected.items():
        table = render(load(PROJECT_ROOT / "bench" / "gpu" / f"h100-2026-11-24-{name}.jsonl"))
        assert row in table and verdict in table
    assert expected["both-1"][0] in readme and expected["both-2"][0] in readme
    assert "run A **21 of 26**, run B **19 of 26**" in readme


def test_the_paired_c1_run_renders_as_the_readme_says() -> None:
    table = render(load(PROJECT_ROOT / "bench" / "gpu" / "h100-2026-11-24-c1.jsonl"))
    assert "| tiny | 1 | 396 | 409 | 411 | – | 0.99 | – | 1.03 | 6.8 / 7.2 / – |" in table
    assert "| tiny | 1 | ours4 | 409 (380–444) |" in table and "| tiny | 1 | vllm1 | 411 (361–467) |" in table
    assert "ours 409 tok/s (rounds 380–444), `vllm serve` 411 (361–467)" in (PROJECT_ROOT / "README.md").read_text()
