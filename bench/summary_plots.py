"""The results page's plots, drawn from the recorded runs' figures (bench/summary.py picks
them). Each PNG carries the SHA-256 of the figures it plots, so that a check can tell a
stale plot without redrawing it (pixels differ between matplotlib releases)."""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.gpu import table
from bench.summary import Row, Spread

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from bench.runs import RecordedRun

PlotData = dict[str, Any]
KEY = "Description"
"""The PNG text field holding the figures' SHA-256."""
COLOURS = {"engine": "tab:green", "ours": "tab:blue", "vllm1": "tab:orange", "vllmN": "tab:red"}


def closed_loop_data(run: RecordedRun) -> PlotData:
    """tok/s against C for each target of the run, per model shape."""
    records = table.load(run.gpu_results)
    n = table.processes(records)
    labels = {
        "engine": "engine in-process",
        "ours": f"ours, {n} processes",
        "vllm1": "vllm serve, 1 API process",
        "vllmN": f"vllm serve, {n} API processes",
    }
    shapes: dict[str, dict[str, list[list[float]]]] = {}
    for cell in table.cells(records, n):
        lines = shapes.setdefault(cell.shape, {})
        for key, record in zip(
            labels, (cell.engine, cell.ours, cell.vllm, cell.vllm_n), strict=True
        ):
            if record:
                lines.setdefault(key, []).append([cell.c, round(record["tok_s"], 1)])
    return {"run": run.folder.name, "labels": labels, "shapes": shapes}


def spread_data(found: Sequence[Spread], n: int) -> PlotData:
    labels = {
        "vllm1": "vllm serve,\n1 API process",
        "vllmN": f"vllm serve,\n{n} API processes",
        "engine": "engine\nin-process",
    }
    return {"spreads": [[labels[s.versus], list(s.ratios)] for s in found]}


def workload_data(rows: Sequence[Row]) -> PlotData:
    """Each summary row's label and its tok/s and TTFT p50 ratios."""
    return {"rows": [[label(row), *ratios(row)] for row in rows]}


def label(row: Row) -> str:
    return f"{row.machine.removeprefix('NVIDIA ')}, {row.model}, {row.load}, vs {row.vllm}"


def ratios(row: Row) -> tuple[float, float | None]:
    ttft = None if row.ttft_ratio is None else round(row.ttft_ratio, 4)
    return round(row.tok_ratio, 4), ttft


def fingerprint(data: PlotData) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure: Figure, path: Path, data: PlotData) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, metadata={"Software": None, KEY: fingerprint(data)})
    pyplot().close(figure)


def draw_closed_loop(data: PlotData, path: Path) -> None:
    """One panel per model shape: output tok/s against concurrent streams."""
    shapes = sorted(data["shapes"])
    figure, panels = pyplot().subplots(
        1, len(shapes), figsize=(5 * len(shapes), 3.8), squeeze=False, constrained_layout=True
    )
    for axes, shape in zip(panels[0], shapes, strict=True):
        for key, points in data["shapes"][shape].items():
            xs, ys = zip(*points, strict=True)
            axes.plot(xs, ys, "o-", color=COLOURS[key], label=data["labels"][key])
        axes.set_xscale("log", base=2)
        levels = sorted({c for points in data["shapes"][shape].values() for c, _ in points})
        axes.set_xticks(levels, [str(int(c)) for c in levels])
        style(axes, f"model shape {shape}", "concurrent streams", "output tokens/s")
        axes.legend(fontsize=8)
    figure.suptitle(f"Closed loop on a GPU, benchmarks/runs/{data['run']}", fontsize=10)
    save(figure, path, data)


def draw_spread(data: PlotData, path: Path) -> None:
    """Each level's ratio as a dot, one row per target compared, the median as a bar."""
    figure, axes = pyplot().subplots(figsize=(8, 3.2), constrained_layout=True)
    for row, (_, found) in enumerate(data["spreads"]):
        offsets = [((i % 7) - 3) * 0.05 for i in range(len(found))]
        axes.scatter(found, [row + o for o in offsets], s=14, alpha=0.6, color="tab:blue")
        median = statistics.median(found)
        axes.plot([median, median], [row - 0.3, row + 0.3], color="black", linewidth=2)
    axes.set_yticks(range(len(data["spreads"])), [label for label, _ in data["spreads"]])
    for bound in (1.0, 2.0):
        axes.axvline(bound, color="grey", linewidth=0.8, linestyle="--")
    style(
        axes,
        "ours' output tok/s over each target's, 256 streams, every recorded GPU run",
        "ours / target (dots: one model shape of one run; bar: median)",
        "",
    )
    save(figure, path, data)


def draw_workloads(data: PlotData, path: Path) -> None:
    """The summary table's ratios, one pair of bars per row."""
    rows = data["rows"]
    figure, axes = pyplot().subplots(figsize=(9, 0.34 * len(rows) + 1.4), constrained_layout=True)
    ys = range(len(rows))
    axes.barh([y - 0.2 for y in ys], [r[1] for r in rows], 0.4, label="tok/s", color="tab:blue")
    ttft = [(y + 0.2, r[2]) for y, r in zip(ys, rows, strict=True) if r[2] is not None]
    axes.barh([y for y, _ in ttft], [v for _, v in ttft], 0.4, label="TTFT p50", color="tab:grey")
    axes.set_yticks(list(ys), [r[0] for r in rows], fontsize=7)
    axes.invert_yaxis()
    axes.axvline(1.0, color="black", linewidth=0.8)
    style(axes, "ours / vllm serve, the summary table's rows", "ratio (1.0: equal)", "")
    axes.legend(fontsize=8)
    save(figure, path, data)


def style(axes: Axes, title: str, xlabel: str, ylabel: str) -> None:
    axes.set_title(title, fontsize=9)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)


def recorded_fingerprint(path: Path) -> str | None:
    """The figures' SHA-256 the PNG at `path` was drawn from; None if there is none."""
    if not path.exists():
        return None
    from PIL import Image

    with Image.open(path) as image:
        text: dict[str, str] = getattr(image, "text", {})
        return text.get(KEY)
