"""The run's output: Markdown tables on stdout, checks against the targets, JSON and a plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.micro import MicroStats
from bench.stats import LevelStats, Ratio

TARGET_ORDER = ("engine", "ours", "ours-grpc", "ours-openai", "vllm-openai")
COLOURS = {
    "engine": "tab:green",
    "ours": "tab:blue",
    "ours-grpc": "tab:purple",
    "ours-openai": "tab:red",
    "vllm-openai": "tab:orange",
}
MICRO_US_PER_EVENT = 50.0


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def results_table(results: Sequence[LevelStats]) -> str:
    header = [
        "target",
        "C",
        "requests",
        "errors",
        "tok/s",
        "req/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "ITL p50 ms",
        "ITL p99 ms",
    ]
    ordered = sorted(results, key=lambda s: (s.concurrency, target_rank(s.target)))
    rows = [
        [
            s.target,
            str(s.concurrency),
            str(s.requests),
            str(s.errors),
            fmt(s.tokens_per_s),
            fmt(s.requests_per_s, 2),
            fmt(s.ttft_ms_p50),
            fmt(s.ttft_ms_p99),
            fmt(s.itl_ms_p50),
            fmt(s.itl_ms_p99),
        ]
        for s in ordered
    ]
    return markdown(header, rows)


def ratios_table(found: Sequence[Ratio]) -> str:
    levels = sorted({r.concurrency for r in found})
    get = {(r.versus, r.concurrency): r for r in found}
    header = [
        "C",
        "tok/s ours/engine",
        "tok/s ours/vllm-openai",
        "TTFT p50 ours/engine",
        "TTFT p50 ours/vllm-openai",
        "TTFT p50 ours−engine ms",
    ]
    rows = []
    for c in levels:
        engine, vllm = get.get(("engine", c)), get.get(("vllm-openai", c))
        rows.append(
            [
                str(c),
                fmt(engine.tokens_per_s if engine else None, 2),
                fmt(vllm.tokens_per_s if vllm else None, 2),
                fmt(engine.ttft_p50 if engine else None, 2),
                fmt(vllm.ttft_p50 if vllm else None, 2),
                fmt(engine.ttft_p50_delta_ms if engine else None, 1),
            ]
        )
    return markdown(header, rows)


def grpc_table(found: Sequence[Ratio]) -> str:
    """ours-grpc against ours (SSE), per concurrency."""
    header = ["C", "tok/s gRPC/SSE", "TTFT p50 gRPC/SSE", "TTFT p50 gRPC−SSE ms"]
    rows = [
        [
            str(r.concurrency),
            fmt(r.tokens_per_s, 2),
            fmt(r.ttft_p50, 2),
            fmt(r.ttft_p50_delta_ms, 1),
        ]
        for r in found
    ]
    return markdown(header, rows)


def openai_ratios_table(found: Sequence[Ratio]) -> str:
    """ours-openai against vllm-openai: the same route, requests and engine arguments."""
    header = ["C", "tok/s ours-openai/vllm-openai", "TTFT p50 ours-openai/vllm-openai"]
    rows = [
        [str(r.concurrency), fmt(r.tokens_per_s, 2), fmt(r.ttft_p50, 2)]
        for r in sorted(found, key=lambda r: r.concurrency)
    ]
    return markdown(header, rows)


def openai_checks(found: Sequence[Ratio]) -> list[dict[str, Any]]:
    """The OpenAI frontend's targets against vLLM's own server (never asserted)."""
    if not found:
        return []
    tokens = [r.tokens_per_s for r in found]
    ttft = [r.ttft_p50 for r in found]
    return [
        {
            "goal": "tok/s ours-openai ≥ 1.0 × vllm-openai at every C",
            "values": tokens,
            "met": all(v is not None and v >= 1.0 for v in tokens),
        },
        {
            "goal": "TTFT p50 ours-openai ≤ vllm-openai at every C",
            "values": ttft,
            "met": all(v is not None and v <= 1.0 for v in ttft),
        },
    ]


def micro_table(micro: Sequence[MicroStats]) -> str:
    header = [
        "protocol",
        "C",
        "requests",
        "errors",
        "responses",
        "responses/s",
        "server µs/response",
        "server CPU share",
        "client µs/event",
    ]
    rows = [
        [
            "gRPC" if m.protocol == "grpc" else "SSE",
            str(m.concurrency),
            str(m.requests),
            str(m.errors),
            str(m.events),
            fmt(m.events_per_s, 0),
            fmt(m.server_us_per_event),
            fmt(m.server_cpu_share, 2),
            fmt(m.client_us_per_event),
        ]
        for m in micro
    ]
    return markdown(header, rows)


def checks(
    found: Sequence[Ratio], micro: Sequence[MicroStats], grpc: Sequence[Ratio] = ()
) -> list[dict[str, Any]]:
    """The issue's targets, each met or missed with the figures behind it (never asserted)."""
    out = []

    def add(goal: str, values: Sequence[float | None], ok: bool) -> None:
        out.append({"goal": goal, "values": values, "met": bool(values) and ok})

    vs_vllm = [r.tokens_per_s for r in found if r.versus == "vllm-openai"]
    if vs_vllm:
        add(
            "tok/s ours ≥ 1.05 × vllm-openai at every C",
            vs_vllm,
            all(v is not None and v >= 1.05 for v in vs_vllm),
        )
    vs_engine = [r.tokens_per_s for r in found if r.versus == "engine"]
    if vs_engine:
        add(
            "tok/s ours ≥ 0.90 × engine at every C",
            vs_engine,
            all(v is not None and v >= 0.90 for v in vs_engine),
        )
    ttft = [r.ttft_p50_delta_ms for r in found if r.versus == "engine" and r.concurrency == 1]
    if ttft:
        add("TTFT p50 ours ≤ engine + 5 ms at C=1", ttft, ttft[0] is not None and ttft[0] <= 5)
    vs_sse = [r.tokens_per_s for r in grpc]
    if vs_sse:
        add(
            "tok/s ours-grpc ≥ ours (SSE) at every C",
            vs_sse,
            all(v is not None and v >= 1.0 for v in vs_sse),
        )
    per_event = [m.server_us_per_event for m in micro if m.protocol == "sse"]
    if per_event:
        add(
            f"micro: server CPU ≤ {MICRO_US_PER_EVENT:.0f} µs per SSE event",
            per_event,
            all(v <= MICRO_US_PER_EVENT for v in per_event),
        )
    return out


def checks_text(found: list[dict[str, Any]]) -> str:
    lines = []
    for check in found:
        values = ", ".join(fmt(v, 2) for v in check["values"])
        lines.append(f"- {'met   ' if check['met'] else 'MISSED'} {check['goal']}: {values}")
    return "\n".join(lines)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def plot(results: Sequence[LevelStats], path: Path, title: str) -> None:
    """tokens/s and TTFT (p50 solid, p99 dashed) against concurrency, one line per target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (throughput, ttft) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    levels = sorted({s.concurrency for s in results})
    for target in sorted({s.target for s in results}, key=target_rank):
        rows = sorted((s for s in results if s.target == target), key=lambda s: s.concurrency)
        xs = [s.concurrency for s in rows]
        colour = COLOURS.get(target)
        throughput.plot(xs, [s.tokens_per_s for s in rows], "o-", color=colour, label=target)
        ttft.plot(xs, [s.ttft_ms_p50 for s in rows], "o-", color=colour, label=f"{target} p50")
        ttft.plot(
            xs, [s.ttft_ms_p99 for s in rows], "x--", color=colour, alpha=0.6, label=f"{target} p99"
        )
    for axes, label in ((throughput, "output tokens/s"), (ttft, "time to first token (ms)")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(levels, [str(c) for c in levels])
        axes.set_xlabel("concurrent clients")
        axes.set_ylabel(label)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    ttft.set_yscale("log")
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def target_rank(name: str) -> int:
    return TARGET_ORDER.index(name) if name in TARGET_ORDER else len(TARGET_ORDER)
