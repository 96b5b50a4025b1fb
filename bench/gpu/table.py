"""The GPU run's results (results.jsonl of run.py) as Markdown: per model shape and C, ours
with N frontend processes against `vllm serve` with 1 and with N API processes and the
in-process engine, then the acceptance checks of the multi-process serving layer."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Record = dict[str, Any]
TARGET = re.compile(r"^(ours|vllm)(\d+)$")


@dataclass(frozen=True)
class Check:
    what: str
    ours: float
    bound: float
    met: bool


def load(path: Path) -> list[Record]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class Cell:
    """One shape and C: the record of each compared target (None where it did not run)."""

    shape: str
    c: int
    engine: Record | None
    ours: Record | None
    vllm: Record | None
    vllm_n: Record | None


def processes(records: list[Record]) -> int:
    """N of `oursN` and `vllmN`: the largest that ran for both (else the largest of ours)."""
    ran = {(m.group(1), int(m.group(2))) for r in records if (m := TARGET.match(r["target"]))}
    ours = [n for kind, n in ran if kind == "ours"]
    paired = [n for n in ours if n > 1 and ("vllm", n) in ran]
    return max(paired or ours or [n for _, n in ran] or [1])


MEANS = (
    "tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "server_cpu_us_per_token",
)


def combined(rounds: list[Record]) -> Record:
    """A target's records of one shape and C over several rounds, as one: the mean of each
    figure, and the lowest and highest tok/s."""
    if len(rounds) == 1:
        return rounds[0]
    mean = {
        field: sum(r[field] for r in rounds) / len(rounds) for field in MEANS if field in rounds[0]
    }
    speeds = [r["tok_s"] for r in rounds]
    return {**rounds[0], **mean, "rounds": len(rounds), "tok_s_range": (min(speeds), max(speeds))}


def measured_by_target(records: list[Record]) -> dict[tuple[str, str, int], Record]:
    """(shape, target, C) → its record, over its rounds combined."""
    measured: dict[tuple[str, str, int], list[Record]] = {}
    for r in records:
        if "c" in r and not r.get("failed") and r.get("round") != "profile":
            measured.setdefault((r["shape"], r["target"], r["c"]), []).append(r)
    return {key: combined(rounds) for key, rounds in measured.items()}


def cells(records: list[Record], n: int, ours: str | None = None) -> list[Cell]:
    """Every shape and C that ran, in order; failed targets (no "c") and profiled levels are
    left out; a target measured in several rounds is their mean. `ours`: the target taken as
    ours (default `oursN`)."""
    found = measured_by_target(records)
    return [
        Cell(
            shape,
            c,
            *(
                found.get((shape, t, c))
                for t in ("engine", ours or f"ours{n}", "vllm1", f"vllm{n}")
            ),
        )
        for shape, c in sorted({(shape, c) for shape, _, c in found})
    ]


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def ratio(top: Record | None, bottom: Record | None) -> float | None:
    if not top or not bottom or not bottom["tok_s"]:
        return None
    quotient: float = top["tok_s"] / bottom["tok_s"]
    return quotient


def value_of(record: Record | None, field: str) -> Any:
    """The record's field; None where the target did not run."""
    return record[field] if record else None


def three(field: str, rows: list[Record | None], digits: int) -> str:
    return " / ".join(fmt(value_of(r, field), digits) for r in rows)


def render(records: list[Record], detailed: bool = True) -> str:
    """The Markdown table and the checks, met or not; `detailed` adds each target's figures
    over its rounds and lists the checks met too (else only those not met)."""
    n = processes(records)
    header = (
        f"| model | C | engine in-process | ours, {n} processes "
        f"| vllm serve | vllm serve, {n} API processes "
        f"| ours / vllm serve | ours / vllm {n} | ours / engine | ITL p99 ours / vllm / vllm {n} "
        f"| TTFT p50 ours / vllm / vllm {n} | server µs/token ours / vllm / vllm {n} |"
    )
    lines = [header, "|" + "---|" * 12]
    for cell in cells(records, n):
        e, o, v, vn = cell.engine, cell.ours, cell.vllm, cell.vllm_n
        lines.append(
            f"| {cell.shape} | {cell.c} | {fmt(value_of(e, 'tok_s'))} "
            f"| {fmt(value_of(o, 'tok_s'))} | {fmt(value_of(v, 'tok_s'))} "
            f"| {fmt(value_of(vn, 'tok_s'))} | {fmt(ratio(o, v), 2)} | {fmt(ratio(o, vn), 2)} "
            f"| {fmt(ratio(o, e), 2)} "
            f"| {three('itl_p99_ms', [o, v, vn], 1)} | {three('ttft_p50_ms', [o, v, vn], 0)} "
            f"| {three('server_cpu_us_per_token', [o, v, vn], 0)} |"
        )
    if detailed:
        lines += ["", *every_target(records)]
    lines += check_lines("Checks:", checks(records), detailed)
    null = lone_request_checks(records, f"vllm{n}")
    if null:
        lines += [
            "",
            f"The same C = 1 checks of vllm serve with {n} API processes "
            f"against vllm serve (the same code "
            f"for a lone request, so the noise between engine instances): "
            f"{sum(c.met for c in null)} of {len(null)} met",
        ]
    lines += variants(records, n)
    profile = lone_request_profile(records)
    if profile:
        lines += ["", *profile]
    return "\n".join(lines) + "\n"


def check_lines(heading: str, found: list[Check], with_met: bool) -> list[str]:
    """`heading X of Y met`, then a list of the checks not met (with `with_met`, all)."""
    listed = [c for c in found if with_met or not c.met]
    lines = ["", f"{heading} {sum(c.met for c in found)} of {len(found)} met"]
    if listed:
        lines.append("")
    return lines + [
        f"- {'met' if c.met else 'NOT met'}: {c.what}: {round(c.ours, 2)} "
        f"(bound {round(c.bound, 2)})"
        for c in listed
    ]


VARIANTS = (
    ("m", "With the vllm: metrics on", " without them"),
    ("g", "Over Triton's gRPC (ModelStreamInfer, a call per request)", ""),
)
"""Ours run another way beside `oursN`: the target's suffix, how the table names it, and how
it names `oursN` beside it."""


def variants(records: list[Record], n: int) -> list[str]:
    """Ours run another way (`oursNm`: the backend's `vllm:` metrics on, as `vllm serve`
    always records its own; `oursNg`: over gRPC): the same checks, and its tok/s against
    `oursN`."""
    found = measured_by_target(records)
    lines: list[str] = []
    for suffix, label, after_ours in VARIANTS:
        target = f"ours{n}{suffix}"
        if not any(t == target for _, t, _ in found):
            continue
        lines += check_lines(f"{label} ({target}): checks", checks(records, target), False)
        lines.append("")
        for shape, c in sorted({(shape, c) for shape, t, c in found if t == target}):
            on, off = found[(shape, target, c)], found.get((shape, f"ours{n}", c))
            lines.append(
                f"- {shape} C={c}: {on['tok_s']:,.0f} tok/s, {fmt(ratio(on, off), 2)} × ours{n}"
                f"{after_ours}; TTFT p50 {fmt(on.get('ttft_p50_ms'), 1)} ms "
                f"(ours{n} {fmt(value_of(off, 'ttft_p50_ms'), 1)}), "
                f"ITL p99 {fmt(on.get('itl_p99_ms'), 1)} ms "
                f"(ours{n} {fmt(value_of(off, 'itl_p99_ms'), 1)})"
            )
    return lines


PROFILED = ("ttft", "queue", "prefill", "decode_per_token", "e2e")
CLIENT = ("tok_s", "ttft_mean_ms", "itl_mean_ms", "e2e_mean_ms")


def lone_request_profile(records: list[Record]) -> list[str]:
    """Where a lone request's time goes (the interleaved C = 1 levels; ms, means over requests
    and rounds): the client's TTFT against vLLM's own (arrival in the server's frontend to the
    first token there), the engine core's queue and prefill, its decode step per token against
    the client's token gap, and the end-to-end time both ways."""
    rounds: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        if r.get("c") == 1 and r.get("interleaved") and not r.get("failed"):
            rounds.setdefault((r["shape"], r["target"]), []).append(r)
    if not any(r.get("server_ms") for rs in rounds.values() for r in rs):
        return []
    lines = [
        (
            "Where a lone request's time goes (interleaved C = 1, ms, means; "
            "vLLM's own timings from each "
            "server's /metrics, – where it exports none):"
        ),
        "",
        (
            "| model | target | tok/s | TTFT client / vLLM | client − vLLM TTFT | queue | prefill "
            "| decode step | token gap at the client | e2e client / vLLM |"
        ),
        "|" + "---|" * 10,
    ]
    for (shape, target), rs in sorted(rounds.items()):
        client = {f: mean_of([r.get(f) for r in rs]) for f in CLIENT}
        server = {f: mean_of([r.get("server_ms", {}).get(f) for r in rs]) for f in PROFILED}
        client_ttft, server_ttft = client["ttft_mean_ms"], server["ttft"]
        share = (
            client_ttft - server_ttft
            if client_ttft is not None and server_ttft is not None
            else None
        )
        lines.append(
            f"| {shape} | {target} | {fmt(client['tok_s'])} | {fmt(client['ttft_mean_ms'], 2)} "
            f"/ {fmt(server['ttft'], 2)} "
            f"| {fmt(share, 2)} | {fmt(server['queue'], 2)} | {fmt(server['prefill'], 2)} "
            f"| {fmt(server['decode_per_token'], 3)} | {fmt(client['itl_mean_ms'], 3)} "
            f"| {fmt(client['e2e_mean_ms'], 1)} / {fmt(server['e2e'], 1)} |"
        )
    return lines


def mean_of(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def every_target(records: list[Record]) -> list[str]:
    """Each target's figures, with the range of tok/s over its rounds where it ran several."""
    lines = [
        "| model | C | target | tok/s (range over rounds) | TTFT p50 / p99 ms "
        "| ITL p50 / p99 ms | server µs/token |",
        "|" + "---|" * 7,
    ]
    for (shape, target, c), r in sorted(
        measured_by_target(records).items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])
    ):
        low, high = r.get("tok_s_range", (r["tok_s"], r["tok_s"]))
        spread = f" ({low:,.0f}–{high:,.0f})" if r.get("rounds") else ""
        lines.append(
            f"| {shape} | {c} | {target} | {r['tok_s']:,.0f}{spread} "
            f"| {fmt(r.get('ttft_p50_ms'), 1)} / {fmt(r.get('ttft_p99_ms'), 1)} "
            f"| {fmt(r.get('itl_p50_ms'), 2)} / {fmt(r.get('itl_p99_ms'), 2)} "
            f"| {fmt(r.get('server_cpu_us_per_token'))} |"
        )
    return lines


def checks(records: list[Record], ours: str | None = None) -> list[Check]:
    """The acceptance of the multi-process serving layer, for every shape and C that ran
    (`ours`: the target taken as ours, default `oursN`)."""
    n = processes(records)
    result: list[Check] = []
    for cell in cells(records, n, ours):
        o, v, vn, e, c = cell.ours, cell.vllm, cell.vllm_n, cell.engine, cell.c
        if not o:
            continue
        at = f"{cell.shape} C={c}"
        if v:
            floor = 1.8 if c >= 256 else 1.0
            result.append(at_least(f"{at} tok/s ours / vllm serve", ratio(o, v), floor))
            result.append(
                at_most(f"{at} ITL p99 ms ours vs vllm serve", o["itl_p99_ms"], v["itl_p99_ms"])
            )
            result.append(
                at_most(f"{at} TTFT p50 ms ours vs vllm serve", o["ttft_p50_ms"], v["ttft_p50_ms"])
            )
        if vn and n > 1:
            result.append(
                at_least(f"{at} tok/s ours / vllm serve with {n} API processes", ratio(o, vn), 1.0)
            )
        if e and c >= 256:
            result.append(at_least(f"{at} tok/s ours / engine in-process", ratio(o, e), 0.9))
    return result


def lone_request_checks(records: list[Record], target: str) -> list[Check]:
    """The C = 1 checks against `vllm serve` applied to another target (a null comparison
    when that target is vLLM's own server with more API processes)."""
    if target == "vllm1":
        return []
    found = measured_by_target(records)
    result: list[Check] = []
    for shape in sorted({shape for shape, _, c in found if c == 1}):
        other, vllm = found.get((shape, target, 1)), found.get((shape, "vllm1", 1))
        if not other or not vllm:
            continue
        at = f"{shape} C=1 {target}"
        result.append(at_least(f"{at} tok/s / vllm serve", ratio(other, vllm), 1.0))
        result.append(
            at_most(f"{at} ITL p99 ms vs vllm serve", other["itl_p99_ms"], vllm["itl_p99_ms"])
        )
        result.append(
            at_most(f"{at} TTFT p50 ms vs vllm serve", other["ttft_p50_ms"], vllm["ttft_p50_ms"])
        )
    return result


def at_least(what: str, value: float | None, bound: float) -> Check:
    return Check(
        what,
        value if value is not None else float("nan"),
        bound,
        value is not None and value >= bound,
    )


def at_most(what: str, value: float, bound: float) -> Check:
    return Check(what, value, bound, value <= bound)
