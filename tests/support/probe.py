"""A readiness probe that keeps answering while a test sends hostile requests, and the
server-side time of each request from the access log."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

READY_PATH = "/v2/health/ready"


@dataclass
class ProbeTimes:
    """Latencies (seconds) of the probes sent meanwhile, and their failures."""

    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def worst(self) -> float:
        return max(self.latencies, default=0.0)


@contextmanager
def readiness_probe(
    base_url: str, interval: float = 0.01, timeout: float = 30.0
) -> Iterator[ProbeTimes]:
    """GET the readiness route in a thread, one probe after another, until the block ends;
    at least one probe is sent, and the last is awaited."""
    times = ProbeTimes()
    stop = threading.Event()

    def run() -> None:
        with httpx.Client(base_url=base_url, timeout=timeout) as client:
            while True:
                started = time.perf_counter()
                try:
                    status = client.get(READY_PATH).status_code
                    if status != 200:
                        times.failures.append(f"status {status}")
                except httpx.HTTPError as exc:
                    times.failures.append(repr(exc))
                times.latencies.append(time.perf_counter() - started)
                if stop.wait(interval):
                    return

    thread = threading.Thread(target=run, name="readiness-probe", daemon=True)
    thread.start()
    try:
        yield times
    finally:
        stop.set()
        thread.join(timeout + 5)


class AccessTimes(logging.Handler):
    """Collects the server's access-log records (`app.access`): path, status and total_ms."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "access", None)
        if isinstance(fields, dict):
            self.records.append(dict(fields))

    def last(self, path_part: str, wait: float = 10.0) -> dict[str, Any]:
        """The latest record whose path contains `path_part` (written once the response has
        ended: awaited for up to `wait` seconds)."""
        deadline = time.monotonic() + wait
        while True:
            found = [r for r in self.records if path_part in str(r.get("path", ""))]
            if found or time.monotonic() > deadline:
                return found[-1]
            time.sleep(0.005)


@contextmanager
def access_times() -> Iterator[AccessTimes]:
    logger = logging.getLogger("app.access")
    handler = AccessTimes()
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
