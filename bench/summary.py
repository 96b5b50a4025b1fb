"""The results page's summary, from the recorded runs: one table of ours against `vllm serve`
(the newest run of each comparison) and the spread of the GPU closed-loop ratios over every
run, which the README quotes. bench/summary_plots.py draws the same figures."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench import workload_report
from bench.gpu import table
from bench.stats import LevelStats

if TYPE_CHECKING:
    from bench.runs import RecordedRun

Record = dict[str, Any]
OURS_OPENAI, VLLM = "ours-openai", "vllm"


@dataclass(frozen=True)
class Row:
    """One comparison of the summary: ours and `vllm serve` under the same load."""

    load: str
    machine: str
    model: str
    ours: str
    vllm: str
    ours_tok_s: float
    vllm_tok_s: float
    ttft_ratio: float | None
    run: RecordedRun

    @property
    def tok_ratio(self) -> float:
        return self.ours_tok_s / self.vllm_tok_s


def machine(run: RecordedRun) -> str:
    """The machine in short: "NVIDIA H100 80GB HBM3", "2 vCPUs"."""
    return re.split(r"[,(]", run.meta["machine"])[0].strip().removeprefix("one ")


def quotient(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def closed_loop_run(gpu: Sequence[RecordedRun]) -> RecordedRun | None:
    """The newest GPU run with the engine, ours and `vllm serve` (1 and N API processes) at
    its highest C on every model shape."""
    for run in gpu:
        records = table.load(run.gpu_results)
        top = [cell for cell in table.cells(records, table.processes(records)) if cell.c > 1]
        highest = {cell.shape: cell for cell in sorted(top, key=lambda cell: cell.c)}
        if highest and all(
            cell.engine and cell.ours and cell.vllm and cell.vllm_n for cell in highest.values()
        ):
            return run
    return None


def closed_loop_rows(run: RecordedRun) -> list[Row]:
    """Per model shape at the highest C: ours with N processes against `vllm serve` with one
    and with N API processes."""
    records = table.load(run.gpu_results)
    n = table.processes(records)
    found: list[Row] = []
    for cell in sorted(table.cells(records, n), key=lambda cell: (cell.shape, -cell.c)):
        if found and found[-1].model == cell.shape:
            continue
        for vllm, label in ((cell.vllm, "1 API process"), (cell.vllm_n, f"{n} API processes")):
            assert cell.ours and vllm
            found.append(
                Row(
                    f"closed loop, {cell.c} streams",
                    machine(run),
                    cell.shape,
                    f"Triton SSE, {n} processes",
                    label,
                    cell.ours["tok_s"],
                    vllm["tok_s"],
                    quotient(cell.ours["ttft_p50_ms"], vllm["ttft_p50_ms"]),
                    run,
                )
            )
    return found


def workload_rows(runs: Sequence[RecordedRun], levels: Callable[[RecordedRun], Any]) -> list[Row]:
    """Per machine, model and workload, the newest run's ours over /v1 against `vllm serve`
    with as many API processes (`levels`: a run's (shape, workload, target) -> level)."""
    newest: dict[tuple[str, str, str], Row] = {}
    for run in runs:
        found = levels(run)
        for (shape, workload, target), ours in found.items():
            reference = found.get((shape, workload, VLLM))
            key = (machine(run), shape, workload)
            if target != OURS_OPENAI or reference is None or key in newest:
                continue
            newest[key] = Row(
                f"{workload} (vllm bench serve)",
                machine(run),
                shape,
                "OpenAI /v1",
                "as many API processes",
                ours["tok_s"],
                reference["tok_s"],
                quotient(ours["ttft_p50_ms"], reference["ttft_p50_ms"]),
                run,
            )
    return sorted(newest.values(), key=gpu_first)


def gpu_first(row: Row) -> tuple[bool, str, str]:
    return row.run.meta["kind"].startswith("cpu"), row.model, row.load


def cpu_bench_rows(run: RecordedRun) -> list[Row]:
    """`make bench` on a CPU at its highest C: ours over /v1 against vLLM's server."""
    results = [LevelStats(**row) for row in json.loads(run.cpu_results.read_text())["results"]]
    c = max(level.concurrency for level in results)
    found = {level.target: level for level in results if level.concurrency == c}
    ours, vllm = found.get(OURS_OPENAI), found.get("vllm-openai")
    if ours is None or vllm is None:
        return []
    return [
        Row(
            f"closed loop, {c} streams",
            machine(run),
            run.meta.get("model", "smollm2"),
            "OpenAI /v1",
            "1 API process",
            ours.tokens_per_s,
            vllm.tokens_per_s,
            quotient(ours.ttft_ms_p50, vllm.ttft_ms_p50),
            run,
        )
    ]


@dataclass(frozen=True)
class Spread:
    """Ours with N processes against one target at the highest C, over every GPU run."""

    versus: str
    ratios: tuple[float, ...]
    runs: int

    def text(self) -> str:
        low, high, median = min(self.ratios), max(self.ratios), statistics.median(self.ratios)
        return f"{low:.2f}–{high:.2f} × (median {median:.2f} ×)"


def spreads(gpu: Sequence[RecordedRun], c: int = 256) -> list[Spread]:
    """tok/s of ours against `vllm serve` with 1 and with N API processes, and against the
    engine in-process, at C = `c`: every shape of every GPU run where both ran."""
    found: dict[str, list[float]] = {"vllm1": [], "vllmN": [], "engine": []}
    counted: dict[str, set[str]] = {key: set() for key in found}
    for run in gpu:
        records = table.load(run.gpu_results)
        for cell in table.cells(records, table.processes(records)):
            if cell.c != c:
                continue
            compared = (("vllm1", cell.vllm), ("vllmN", cell.vllm_n), ("engine", cell.engine))
            for key, other in compared:
                value = table.ratio(cell.ours, other)
                if value is not None:
                    found[key].append(round(value, 4))
                    counted[key].add(run.folder.name)
    return [Spread(key, tuple(found[key]), len(counted[key])) for key in found if found[key]]


def rows(runs: Sequence[RecordedRun], levels: Callable[[RecordedRun], Any]) -> list[Row]:
    """The summary's comparisons, newest run of each: the GPU closed loop, the realistic
    workloads on each machine and model, `make bench` on a CPU."""
    gpu = [run for run in runs if run.meta["kind"] == "gpu"]
    workloads = [run for run in runs if run.meta["kind"] in ("gpu-workloads", "cpu-workloads")]
    cpu = [run for run in runs if run.meta["kind"] == "cpu"]
    found = closed_loop_run(gpu)
    return [
        *(closed_loop_rows(found) if found else []),
        *workload_rows(workloads, levels),
        *(cpu_bench_rows(cpu[0]) if cpu else []),
    ]


def speed(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.1f}"


def ratio_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def table_markdown(found: Sequence[Row]) -> str:
    header = (
        "| load | machine | model | ours | `vllm serve` | ours tok/s | `vllm serve` tok/s "
        "| tok/s ours / vLLM | TTFT p50 ours / vLLM | run |"
    )
    lines = [header, "|" + "---|" * 10]
    for row in found:
        run = f"[{row.run.meta['date']}](runs.md#{anchor(row.run)})"
        lines.append(
            f"| {row.load} | {row.machine} | {row.model} | {row.ours} | {row.vllm} "
            f"| {speed(row.ours_tok_s)} | {speed(row.vllm_tok_s)} | {row.tok_ratio:.2f} "
            f"| {ratio_text(row.ttft_ratio)} | {run} |"
        )
    return "\n".join(lines)


def anchor(run: RecordedRun) -> str:
    """The id of the run's heading on the page of every run."""
    return f"run-{run.folder.name}"


VERSUS = {
    "vllm1": "`vllm serve` with its single API process",
    "vllmN": "`vllm serve --api-server-count {n}`",
    "engine": "vLLM's engine called in-process, without HTTP",
}


def claim(gpu: Sequence[RecordedRun], c: int = 256) -> str:
    """The spread of the GPU closed-loop ratios at C = `c`, over every recorded run."""
    found = spreads(gpu, c)
    if not found:
        return ""
    n = max(table.processes(table.load(run.gpu_results)) for run in gpu)
    lines = [
        f"- {spread.text()} that of {VERSUS[spread.versus].format(n=n)} "
        f"({len(spread.ratios)} measurements, a model shape each, in {spread.runs} runs);"
        for spread in found
    ]
    lines[-1] = lines[-1].removesuffix(";") + "."
    head = (
        f"At {c} concurrent streams on a GPU, over every recorded closed-loop run, ours with {n} "
        "frontend processes served, in output tokens/s:"
    )
    return "\n".join([head, "", *lines])


def routing_run(runs: Sequence[RecordedRun]) -> RecordedRun | None:
    """The newest realistic-workloads run with ours routed two ways between instances."""
    for run in runs:
        if run.meta["kind"].endswith("-workloads"):
            targets = {record.get("target") for record in workload_report.load(run.gpu_results)}
            if len(targets & set(workload_report.ROUTED)) > 1:
                return run
    return None


def routing_markdown(runs: Sequence[RecordedRun]) -> str:
    """The newest run's routing between a model's instances, against ours routed by the
    engines' load."""
    run = routing_run(runs)
    if run is None:
        return ""
    records = [r for r in workload_report.load(run.gpu_results) if r.get("round") != "profile"]
    head = (
        f"Routing between a model's instances ({run.meta['title']}, "
        f"[{run.meta['date']}](runs.md#{anchor(run)})): each target's tok/s and TTFT over those "
        "of ours routed by the engines' load (`ours-openai`), and the engines' prefix-cache hits:"
    )
    return head + "\n\n" + workload_report.routing_table(records)
