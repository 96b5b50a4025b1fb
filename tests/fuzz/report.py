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


@dataclass
class FuzzReport:
    routes: dict[str, RouteCounts] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self, route: str, status: int | str, seconds: float, slow: float = SLOW_SECONDS
    ) -> None:
        """Count one answer; fail on a server error or an answer slower than `slow`."""
        with self._lock:
            counts = self.routes.setdefault(route, RouteCounts())
            counts.inputs += 1
            counts.statuses[str(status)] += 1
            counts.slowest = max(counts.slowest, seconds)
        assert not (isinstance(status, int) and status >= 500), f"{route}: status {status}"
        assert status not in SERVER_FAULTS, f"{route}: gRPC {status}"
        assert seconds < slow, f"{route}: answered after {seconds:.2f} s"

    def count(self, route: str) -> int:
        return self.routes[route].inputs if route in self.routes else 0

    def lines(self) -> list[str]:
        width = max(len(route) for route in self.routes)
        lines = [f"{'route':<{width}}  {'inputs':>7}  {'slowest':>8}  statuses"]
        for route, counts in sorted(self.routes.items()):
            statuses = ", ".join(f"{status}: {n}" for status, n in sorted(counts.statuses.items()))
            lines.append(
                f"{route:<{width}}  {counts.inputs:>7}  {counts.slowest * 1000:>6.0f}ms  {statuses}"
            )
        total = sum(counts.inputs for counts in self.routes.values())
        lines.append(f"{len(self.routes)} routes, {total} inputs (FUZZ_EXAMPLES={EXAMPLES})")
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "examples_per_route": EXAMPLES,
            "routes": {
                route: {
                    "inputs": c.inputs,
                    "statuses": dict(c.statuses),
                    "slowest_ms": round(c.slowest * 1000, 1),
                }
                for route, c in sorted(self.routes.items())
            },
        }


REPORT = FuzzReport()


def requests_left(base_url: str) -> float:
    """Requests the server still holds: admitted and not finished, and the engine's own count
    (the server's gauges, read when scraped)."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    pattern = r"^server_(?:requests_in_flight|engine_requests_unfinished)\{[^}]*\} ([\d.e+]+)$"
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))
