"""What the load generator (loadgen.py) measures: each request's samples (TTFT, token gaps and
their positions, end-to-end time) gathered in an `out` dict, a level's summary line and its
raw samples, and the CPU time of the generator itself."""

import itertools
import json
import resource
import time
from pathlib import Path


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def new_out():
    return {
        "ttft": [],
        "itl": [],
        "itl_pos": [],
        "e2e": [],
        "events": 0,
        "done": 0,
        "errors": 0,
        "empty_events": 0,
    }


SLOW_ITL_BUCKETS = (
    ("0", 0, 1),
    ("1", 1, 2),
    ("2-7", 2, 8),
    ("8-63", 8, 64),
    ("64+", 64, float("inf")),
)
"""Token-gap positions within a request (0: the gap after the first token), for telling
start-of-request delays from steady ones."""


def slow_itl_at(itl, positions):
    """Where the gaps at or over the p99 fall within their requests: count per position bucket."""
    if not itl:
        return {}
    threshold = pct(itl, 99)
    slow = [pos for gap, pos in zip(itl, positions, strict=False) if gap >= threshold]
    return {label: sum(lo <= pos < hi for pos in slow) for label, lo, hi in SLOW_ITL_BUCKETS}


def record(out, t0, stamps):
    """A finished request into `out`: its TTFT, token gaps (with their positions), events and
    end-to-end time, from its start and the arrival time of each event."""
    out["ttft"].append(stamps[0] - t0 if stamps else float("nan"))
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    out["itl"].extend(gaps)
    out["itl_pos"].extend(range(len(gaps)))
    out["events"] += len(stamps)
    out["e2e"].append(time.perf_counter() - t0)
    out["done"] += 1


def count_error(out, exc=None):
    """A failed request into `out` (the first exception's text kept)."""
    out["errors"] += 1
    if exc is not None:
        out.setdefault("exc", repr(exc)[:300])


def write_json(path: str, value: object) -> None:
    """Results to a file, written between measurements (never while a level runs)."""
    Path(path).write_text(json.dumps(value))


def cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def summary(args, c, out, wall):
    toks = out["done"] * args.tokens
    return {
        "target": args.target,
        "c": c,
        "requests": out["done"],
        "errors": out["errors"],
        "wall_s": round(wall, 3),
        "tok_s": round(toks / wall, 1),
        "events": out["events"],
        "ttft_p50_ms": round(1000 * pct(out["ttft"], 50), 1),
        "ttft_p99_ms": round(1000 * pct(out["ttft"], 99), 1),
        "itl_p50_ms": round(1000 * pct(out["itl"], 50), 2),
        "itl_p99_ms": round(1000 * pct(out["itl"], 99), 2),
        "slow_itl_at": slow_itl_at(out["itl"], out["itl_pos"]),
    }


def raw_samples(out, t_start, t_end, client_cpu_s, **extra):
    """A level's raw samples as the runner merges them (`extra` after its start and end)."""
    return {
        "t_start": t_start,
        "t_end": t_end,
        **extra,
        "ttft": out["ttft"],
        "itl": out["itl"],
        "itl_pos": out["itl_pos"],
        "done": out["done"],
        "errors": out["errors"],
        "events": out["events"],
        "empty_events": out["empty_events"],
        "client_cpu_s": client_cpu_s,
        "exc": out.get("exc"),
    }
