"""`make bench-report`: the results page's summary and plots, and the page of every run, are
the ones the recorded runs give; the README's claim is the figures' own."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from app.paths import PROJECT_ROOT
from bench import results_page, runs, summary, summary_plots

README = PROJECT_ROOT / "README.md"


def gpu_runs() -> list[runs.RecordedRun]:
    return [run for run in runs.recorded_runs() if run.meta["kind"] == "gpu"]


def test_the_pages_and_plots_are_up_to_date() -> None:
    """After adding a run under benchmarks/runs/, `make bench-report`."""
    assert results_page.stale() == []
    assert results_page.main(["--check"]) == 0


def test_regenerating_gives_the_same_pages_and_plots_of_the_same_figures(tmp_path: Path) -> None:
    shutil.copy(results_page.DOCS / results_page.RESULTS_PAGE, tmp_path)
    written = results_page.write(runs.RUNS, tmp_path)
    for page in (results_page.RESULTS_PAGE, results_page.RUNS_PAGE):
        assert (tmp_path / page).read_text() == (results_page.DOCS / page).read_text()
    drawn = results_page.plots(runs.recorded_runs())
    assert {plot.name for plot in drawn} == {
        "closed-loop.png",
        "closed-loop-runs.png",
        "comparisons.png",
    }
    for plot in drawn:
        assert tmp_path / plot.name in written
        ours = summary_plots.recorded_fingerprint(tmp_path / plot.name)
        assert ours == summary_plots.recorded_fingerprint(results_page.DOCS / plot.name)
    assert results_page.stale(runs.RUNS, tmp_path) == []


def test_the_summary_opens_the_results_page_with_its_plots_and_one_table() -> None:
    page = (results_page.DOCS / results_page.RESULTS_PAGE).read_text()
    before, generated = page.split(results_page.START)
    assert len(before.splitlines()) < 12, "the summary comes first"
    generated = generated.split(results_page.END)[0]
    assert re.findall(r"!\[[^]]+\]\(([\w-]+\.png)\)", generated) == [
        "closed-loop.png",
        "closed-loop-runs.png",
        "comparisons.png",
    ]
    rows = [line for line in generated.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| load | machine | model |") and len(rows) >= 10
    assert "| closed loop, 256 streams | NVIDIA H100 80GB HBM3 | 1b |" in generated
    assert len(page.splitlines()) < 100, "older runs belong on the page of recorded runs"


def test_the_readme_quotes_the_recorded_spread_and_links_its_plot() -> None:
    spreads = {spread.versus: spread for spread in summary.spreads(gpu_runs())}
    readme = README.read_text()
    assert spreads["vllm1"].text() in readme
    assert spreads["vllmN"].text() in readme
    recorded = runs.recorded_runs()
    workloads = [
        row.tok_ratio
        for row in summary.rows(recorded, runs.workload_levels)
        if row.load.endswith("(vllm bench serve)")
    ]
    assert f"{min(workloads):.2f}–{max(workloads):.2f} × the" in readme
    assert "(docs/benchmarks/closed-loop-runs.png)" in readme


def gpu_level(shape: str, target: str, c: int, tok_s: float) -> dict[str, Any]:
    return {
        "shape": shape,
        "target": target,
        "c": c,
        "tok_s": tok_s,
        "ttft_p50_ms": 100.0,
        "itl_p99_ms": 20.0,
        "server_cpu_us_per_token": 100.0,
    }


def write_gpu_run(root: Path, name: str, sequence: int, ours: float) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    meta = {
        "title": name,
        "date": name[:10],
        "sequence": sequence,
        "kind": "gpu",
        "machine": "one NVIDIA H100 80GB HBM3, 16 CPU cores",
        "software": "s",
        "commit": "abc1234",
        "command": "make bench",
        "about": "a",
    }
    (folder / "run.json").write_text(json.dumps(meta))
    levels = [
        gpu_level("tiny", target, c, tok_s * (c / 256))
        for c in (1, 256)
        for target, tok_s in (("engine", 1000), ("ours4", ours), ("vllm1", 500), ("vllm4", 900))
    ]
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in levels))


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    write_gpu_run(tmp_path, "2026-01-01-h100-old", 1, ours=800)
    write_gpu_run(tmp_path, "2026-01-02-h100-new", 1, ours=1100)
    return tmp_path


def test_the_table_takes_the_newest_run_and_the_claim_every_run(two_runs: Path) -> None:
    recorded = runs.recorded_runs(two_runs)
    rows = summary.rows(recorded, runs.workload_levels)
    assert [(row.vllm, round(row.tok_ratio, 2), row.run.folder.name) for row in rows] == [
        ("1 API process", 2.2, "2026-01-02-h100-new"),
        ("4 API processes", 1.22, "2026-01-02-h100-new"),
    ]
    assert "[2026-01-02](runs.md#run-2026-01-02-h100-new)" in summary.table_markdown(rows)
    claim = summary.claim(recorded)
    assert "- 1.60–2.20 × (median 1.90 ×) that of `vllm serve` with its single API" in claim
    assert "(2 measurements, a model shape each, in 2 runs)" in claim


def test_a_plot_drawn_from_other_figures_is_stale(two_runs: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "results.md").write_text(f"# R\n\n{results_page.START}\n{results_page.END}\n")
    results_page.write(two_runs, docs)
    assert results_page.stale(two_runs, docs) == []
    write_gpu_run(two_runs, "2026-01-03-h100-newer", 1, ours=1200)
    assert set(results_page.stale(two_runs, docs)) == {
        docs / "results.md",
        docs / "runs.md",
        docs / "closed-loop.png",
        docs / "closed-loop-runs.png",
        docs / "comparisons.png",
    }
