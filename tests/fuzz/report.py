"""What the fuzz tier sent and what came back, per route: the counts it reports, and the
checks every answer must pass (no server error, no slow answer)."""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.paths import PROJECT_ROOT

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000"))
"""Inputs per route (CI: 1000; a longer run sets more)."""
SLOW_SECONDS = float(os.environ.get("FUZZ_SLOW_SECONDS", "5"))
"""No answer may take longer (the engine double answers in milliseconds), and no readiness
probe, whatever the engine does meanwhile."""
PROBE_SLOW_SECONDS = 3 * SLOW_SECONDS
"""No readiness probe sent while the inputs are sent may take longer: a 2-core host busy with
the engine tier beside the fuzz tier delayed one by 7.6 s; the stall it guards against lasted
24 s."""
ENGINE_SLOW_SECONDS = float(os.environ.get("FUZZ_ENGINE_SLOW_SECONDS", "60"))
"""No answer of the real engine may take longer: a whole context's prefill on a slow CPU
takes seconds (it runs in the engine's process; the readiness probe is held to SLOW_SECONDS)."""
_PART = f"-{os.environ['SUITE_PART']}" if os.environ.get("SUITE_PART") else ""
REPORT_PATH = PROJECT_ROOT / "tests" / "artifacts" / f"fuzz-report{_PART}.json"
SERVER_FAULTS = frozenset({"INTERNAL", "UNKNOWN", "DATA_LOSS"})
"""gRPC codes that are the server's fault: none may come back."""


@dataclass
class RouteCounts:
    inputs: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    slowest: float = 0.0
    routes: Counter[str] = field(default_factory=Counter)
    """A family's inputs per route."""


@dataclass
class FuzzReport:
    routes: dict[str, RouteCounts] = field(default_factory=dict)
    families: dict[str, RouteCounts] = field(default_factory=dict)
    """The same counts per family of inputs (edge values, long strings in lists...)."""
    pairs: int = 0
    """Bodies sent both streamed and not (stream parity)."""
    mismatches: list[str] = field(default_factory=list)
    """Pairs whose answers were not of the same kind: each a failure."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self,
        route: str,
        status: int | str,
        seconds: float,
        slow: float = SLOW_SECONDS,
        family: str | None = None,
    ) -> None:
        """Count one answer; fail on a server error or an answer slower than `slow`."""
        with self._lock:
            count_in(self.routes, route, status, seconds)
            if family is not None:
                count_in(self.families, family, status, seconds)
                self.families[family].routes[route] += 1
        assert not (isinstance(status, int) and status >= 500), f"{route}: status {status}"
        assert status not in SERVER_FAULTS, f"{route}: gRPC {status}"
        assert seconds < slow, f"{route}: answered after {seconds:.2f} s"

    def parity(self, mismatch: str | None) -> None:
        """Count one pair of the same body streamed and not; `mismatch` says how their
        answers differed (None: they did not)."""
        with self._lock:
            self.pairs += 1
            if mismatch is not None and mismatch not in self.mismatches:
                self.mismatches.append(mismatch)

    def count(self, route: str) -> int:
        return self.routes[route].inputs if route in self.routes else 0

    def count_of_family(self, family: str, route: str) -> int:
        return self.families[family].routes[route] if family in self.families else 0

    def lines(self) -> list[str]:
        lines = table("route", self.routes)
        total = sum(counts.inputs for counts in self.routes.values())
        lines.append(f"{len(self.routes)} routes, {total} inputs (FUZZ_EXAMPLES={EXAMPLES})")
        if self.families:
            lines += ["", *table("family", self.families)]
        lines.append(f"stream parity: {self.pairs} pairs, {len(self.mismatches)} mismatches")
        lines += [f"  MISMATCH {mismatch}" for mismatch in self.mismatches]
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "examples_per_route": EXAMPLES,
            "routes": counts_json(self.routes),
            "families": counts_json(self.families),
            "stream_parity": {"pairs": self.pairs, "mismatches": self.mismatches},
        }


def count_in(table: dict[str, RouteCounts], key: str, status: int | str, seconds: float) -> None:
    counts = table.setdefault(key, RouteCounts())
    counts.inputs += 1
    counts.statuses[str(status)] += 1
    counts.slowest = max(counts.slowest, seconds)


def table(title: str, rows: dict[str, RouteCounts]) -> list[str]:
    """Inputs, slowest answer and statuses of each row, one line each."""
    width = max(len(title), *(len(key) for key in rows))
    lines = [f"{title:<{width}}  {'inputs':>7}  {'slowest':>8}  statuses"]
    for key, counts in sorted(rows.items()):
        statuses = ", ".join(f"{status}: {n}" for status, n in sorted(counts.statuses.items()))
        lines.append(
            f"{key:<{width}}  {counts.inputs:>7}  {counts.slowest * 1000:>6.0f}ms  {statuses}"
        )
    return lines


def counts_json(rows: dict[str, RouteCounts]) -> dict[str, Any]:
    return {
        key: {
            "inputs": c.inputs,
            "statuses": dict(c.statuses),
            "slowest_ms": round(c.slowest * 1000, 1),
            **({"routes": dict(sorted(c.routes.items()))} if c.routes else {}),
        }
        for key, c in sorted(rows.items())
    }


REPORT = FuzzReport()


def requests_left(base_url: str) -> float:
    """Requests the server still holds: admitted and not finished, and the engine's own count
    (the server's gauges, read when scraped)."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    pattern = r"^server_(?:requests_in_flight|engine_requests_unfinished)\{[^}]*\} ([\d.e+]+)$"
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))
