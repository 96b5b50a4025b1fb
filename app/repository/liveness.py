"""Whether an engine is getting somewhere: judged by its progress (its step counter moves),
never by how long one step takes. A busy engine may leave a health probe unanswered for as
long as a step lasts; only an idle one that does not answer, or a busy one that has not
stepped for a long time, is hung."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.core.types import InferenceEngine

Clock = Callable[[], float]


@dataclass(frozen=True)
class ProgressMark:
    """Where an engine stood when a probe was sent."""

    steps: int
    busy_checks: int


class ProgressWatch:
    """Follows one engine's step counter and pending requests (`check`, called periodically)
    and judges an unanswered probe by what the engine did meanwhile (`judge_unanswered`)."""

    def __init__(
        self, engine: InferenceEngine, stall_seconds: float, clock: Clock = time.monotonic
    ) -> None:
        self._engine = engine
        self._stall_seconds = stall_seconds
        self._clock = clock
        self._steps = engine.progress
        self._moved_at = clock()
        self._busy_checks = 0

    def check(self) -> None:
        """Note whether the engine stepped, and whether it has requests to step."""
        steps, pending = self._engine.progress, self._engine.num_unfinished_requests
        if steps != self._steps or not pending:
            self._steps, self._moved_at = steps, self._clock()
        if pending:
            self._busy_checks += 1

    def mark(self) -> ProgressMark:
        self.check()
        return ProgressMark(self._steps, self._busy_checks)

    @property
    def still_for(self) -> float:
        """Seconds since the engine last stepped, or last had nothing to do."""
        return self._clock() - self._moved_at

    def judge_unanswered(self, mark: ProgressMark) -> str | None:
        """Why an engine that left the probe sent at `mark` unanswered is hung, or None when
        it was busy (it stepped meanwhile, or it has requests and stepped recently)."""
        self.check()
        if self._steps != mark.steps:
            return None
        if self._busy_checks == mark.busy_checks:
            return "it is idle and did not answer"
        if self.still_for >= self._stall_seconds:
            return f"it has made no progress for {self.still_for:.0f} s with requests pending"
        return None
