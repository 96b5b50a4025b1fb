"""The realistic workloads' figures: K `vllm bench serve` result files merged into one level,
and the tables and checks of a run (results.jsonl of `python -m bench.realistic`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Record = dict[str, Any]
REFERENCE = "vllm"
ROUTED = ("ours-openai", "ours-cache", "ours-process")
"""Ours' targets routed differently between a model's instances; the first is the baseline."""
FIGURES = (
    "tok_s",
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "server_cpu_us_per_token",
)
LOWER_IS_BETTER = ("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms")
"""The latencies checked against vLLM's server (ours at most its)."""
BOUNDS = {"gpu": 1.0, "cpu": 0.95, "standin": 0.95}
"""Ours at least this × vLLM's output tok/s, and latencies at most its / this (CPU noise)."""


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile (as vLLM's bench reports with numpy's default, closely)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = p / 100 * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def merge(results: list[dict[str, Any]]) -> Record:
    """One level from the detailed result files of its client processes (each with `t_end`,
    added by bench/vllm_client.py): tok/s over the span from the first start to the last
    end; percentiles over every successful request and every inter-token gap."""
    ok = [
        (ttft, itls, out, ttft + sum(itls))
        for result in results
        for ttft, itls, out, error in zip(
            result["ttfts"], result["itls"], result["output_lens"], result["errors"], strict=True
        )
        if not error
    ]
    span = max(r["t_end"] for r in results) - min(r["t_end"] - r["duration"] for r in results)
    tokens = sum(r["total_output_tokens"] for r in results)
    ttfts = [1000 * ttft for ttft, _, _, _ in ok]
    itls = [1000 * gap for _, gaps, _, _ in ok for gap in gaps]
    tpots = [1000 * (lat - ttft) / (out - 1) for ttft, _, out, lat in ok if out > 1]
    return {
        "clients": len(results),
        "requests": sum(r["completed"] for r in results),
        "failed": sum(r.get("failed", 0) for r in results),
        "output_tokens": tokens,
        "duration_s": round(span, 2),
        "tok_s": round(tokens / span, 1) if span > 0 else math.nan,
        "ttft_mean_ms": round(sum(ttfts) / len(ttfts), 1) if ttfts else math.nan,
        "ttft_p50_ms": round(percentile(ttfts, 50), 1),
        "ttft_p99_ms": round(percentile(ttfts, 99), 1),
        "itl_p50_ms": round(percentile(itls, 50), 2),
        "itl_p99_ms": round(percentile(itls, 99), 2),
        "tpot_p50_ms": round(percentile(tpots, 50), 2),
        "errors": sorted({r_error[:160] for r in results for r_error in r["errors"] if r_error})[
            :3
        ],
    }


def load(path: Path) -> list[Record]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class Check:
    shape: str
    workload: str
    target: str
    figure: str
    ratio: float
    met: bool


def levels(records: Iterable[Record]) -> dict[tuple[str, str, str], Record]:
    """(shape, workload, target) -> its levels over the rounds as one (the mean of each
    figure, errors summed)."""
    grouped: dict[tuple[str, str, str], list[Record]] = {}
    for record in records:
        if "tok_s" in record:
            key = (record.get("shape", ""), record["workload"], record["target"])
            grouped.setdefault(key, []).append(record)
    combined = {}
    for key, rounds in grouped.items():
        mean = {f: sum(r[f] for r in rounds) / len(rounds) for f in FIGURES if f in rounds[0]}
        totals = {f: sum(r[f] for r in rounds) for f in ("requests", "failed")}
        combined[key] = {**rounds[0], **mean, **totals, "rounds": len(rounds)}
        combined[key]["engine"] = engine_means([r.get("engine") or {} for r in rounds])
    return combined


def engine_means(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine's view of a level over its rounds: each mean's mean, the prefix-cache hit
    rate over every round's queries, the requests each engine finished in all."""
    found: dict[str, Any] = {}
    for key in ("queue_ms", "prefill_ms", "engine_ttft_ms"):
        values = [r[key] for r in rounds if key in r]
        if values:
            found[key] = sum(values) / len(values)
    queries = sum(r.get("prefix_queries", 0.0) for r in rounds)
    if queries:
        found["hit_rate"] = sum(r.get("prefix_hits", 0.0) for r in rounds) / queries
    spreads = [r["per_engine"] for r in rounds if "per_engine" in r]
    if spreads and all(len(spread) == len(spreads[0]) for spread in spreads):
        found["per_engine"] = [sum(column) for column in zip(*spreads, strict=True)]
    return found


def ratio(ours: Record, reference: Record, figure: str) -> float:
    value, base = ours.get(figure, math.nan), reference.get(figure, math.nan)
    return value / base if base else math.nan


def checks(records: list[Record], kind: str) -> list[Check]:
    """Each ours target against vLLM's server on the same shape and workload: output tok/s
    at least the bound, TTFT p50, p99 and ITL p99 at most vLLM's / the bound."""
    bound = BOUNDS[kind]
    found = []
    table = levels(records)
    for (shape, workload, target), level in sorted(table.items()):
        reference = table.get((shape, workload, REFERENCE))
        if target == REFERENCE or reference is None or target.startswith("base"):
            continue
        speed = ratio(level, reference, "tok_s")
        found.append(Check(shape, workload, target, "tok_s", speed, speed >= bound))
        for figure in LOWER_IS_BETTER:
            value = ratio(level, reference, figure)
            found.append(Check(shape, workload, target, figure, value, value <= 1 / bound))
    return found


def results_table(records: list[Record]) -> str:
    rows = [
        "| shape | workload | target | requests | failed | tok/s | TTFT p50 ms | TTFT p99 ms "
        "| ITL p50 ms | ITL p99 ms | server CPU µs/token |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (shape, workload, target), r in sorted(levels(records).items()):
        rows.append(
            f"| {shape} | {workload} | {target} | {r['requests']} | {r['failed']} "
            f"| {r['tok_s']:.1f} "
            f"| {r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | {r['itl_p50_ms']:.2f} "
            f"| {r['itl_p99_ms']:.2f} | {r.get('server_cpu_us_per_token', math.nan):.0f} |"
        )
    return "\n".join(rows)


def ratios_table(found: list[Check]) -> str:
    """Ours / vLLM's server per shape, workload and target: tok/s (higher is better) and the
    latencies (lower is better)."""
    cells: dict[tuple[str, str, str], dict[str, Check]] = {}
    for check in found:
        cells.setdefault((check.shape, check.workload, check.target), {})[check.figure] = check
    rows = [
        "| shape | workload | target | tok/s | TTFT p50 | TTFT p99 | ITL p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for (shape, workload, target), figures in sorted(cells.items()):
        values = [mark(figures[f]) for f in ("tok_s", *LOWER_IS_BETTER)]
        rows.append(f"| {shape} | {workload} | {target} | " + " | ".join(values) + " |")
    return "\n".join(rows)


def mark(check: Check) -> str:
    return f"{check.ratio:.3f}" + ("" if check.met else " ✗")


def routing_table(records: list[Record]) -> str:
    """Ours routed otherwise against ours routed by the engines' load (the first of
    `ROUTED`), per shape and workload, with each target's prefix-cache hits and spread."""
    table = levels(records)
    rows = [
        "| shape | workload | target | tok/s | TTFT p50 | TTFT p99 | prefix-cache hits "
        "| requests per engine |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (shape, workload, target), level in sorted(table.items()):
        base = table.get((shape, workload, ROUTED[0]))
        if base is None or target not in (*ROUTED, REFERENCE):
            continue
        ratios = [f"{ratio(level, base, f):.3f}" for f in ("tok_s", "ttft_p50_ms", "ttft_p99_ms")]
        engine = level.get("engine", {})
        hits = f"{engine['hit_rate']:.0%}" if "hit_rate" in engine else "–"
        spread = "/".join(map(str, engine.get("per_engine", []))) or "–"
        rows.append(
            f"| {shape} | {workload} | {target} | " + " | ".join(ratios) + f" | {hits} | {spread} |"
        )
    return "\n".join(rows)


def engine_view_table(records: list[Record]) -> str:
    """Where time goes before the first token: the clients' mean TTFT against the engine's
    (vLLM's own TTFT histogram: from the request's arrival in the engine's client to its
    first token), its queue and prefill; the rest is spent outside the engine."""
    rows = [
        "| shape | workload | target | client TTFT mean ms | engine TTFT mean ms | queue ms "
        "| prefill ms | outside the engine ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (shape, workload, target), level in sorted(levels(records).items()):
        engine = level.get("engine", {})
        client = level.get("ttft_mean_ms")
        if client is None or "engine_ttft_ms" not in engine:
            continue
        figures = [client, engine["engine_ttft_ms"], engine.get("queue_ms", math.nan)]
        figures += [engine.get("prefill_ms", math.nan), client - engine["engine_ttft_ms"]]
        rows.append(
            f"| {shape} | {workload} | {target} | " + " | ".join(f"{v:.0f}" for v in figures) + " |"
        )
    return "\n".join(rows) if len(rows) > 2 else ""


def render(records: list[Record], kind: str) -> str:
    found = checks(records, kind)
    met = sum(check.met for check in found)
    bound = BOUNDS[kind]
    parts = [
        results_table(records),
        f"Ours / `vllm serve` with as many API processes (✗: tok/s below {bound:g}×, or a "
        f"latency above vLLM's / {bound:g}):",
        ratios_table(found),
        f"Checks met: {met} of {len(found)}.",
    ]
    routed = {record["target"] for record in records} & set(ROUTED)
    if len(routed) > 1 and ROUTED[0] in routed:
        parts += [
            "Routing between instances: each target / ours routed by the engines' load "
            f"(`{ROUTED[0]}`), and the engines' prefix-cache hits:",
            routing_table(records),
        ]
    engine_view = engine_view_table(records)
    if engine_view:
        parts += ["Before the first token: the clients' view against the engine's:", engine_view]
    return "\n\n".join(parts) + "\n"
