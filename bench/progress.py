"""One progress line per target and level: rewritten in place on a terminal, else every few s."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from bench.workload import RequestRecord


class Progress:
    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.interval = 0.25 if self.tty else 10.0

    def note(self, text: str) -> None:
        """A line of its own: a server starting, a target done."""
        if not self.quiet:
            print(f"[bench] {text}", file=self.stream, flush=True)

    def level(self, target: str, concurrency: int, total: int) -> Callable[[RequestRecord], None]:
        """The callback for each finished request of one level."""
        start = last = time.perf_counter()
        done = tokens = errors = 0

        def on_request(record: RequestRecord) -> None:
            nonlocal done, tokens, errors, last
            done += 1
            tokens += record.tokens
            errors += record.error is not None
            now = time.perf_counter()
            if done < total and now - last < self.interval:
                return
            last = now
            elapsed = now - start
            line = (
                f"[bench] {target:<11} c={concurrency:<4} {done:>5}/{total} requests "
                f"{tokens / max(elapsed, 1e-9):8.1f} tok/s  {errors} errors  {elapsed:6.1f} s"
            )
            self._show(line, final=done >= total)

        return on_request

    def _show(self, line: str, final: bool) -> None:
        if self.quiet:
            return
        if self.tty:
            end = "\n" if final else ""
            print(f"\r{line}\033[K", end=end, file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)
