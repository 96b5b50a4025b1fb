"""Judging an engine by its progress: an unanswered probe is a failure only for an idle engine,
or a busy one that has not stepped for the stall time."""

from __future__ import annotations

from dataclasses import dataclass

from app.repository.liveness import ProgressWatch


@dataclass
class Engine:
    progress: int = 0
    num_unfinished_requests: int = 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watched(stall_seconds: float = 60) -> tuple[Engine, Clock, ProgressWatch]:
    engine, clock = Engine(), Clock()
    return engine, clock, ProgressWatch(engine, stall_seconds, clock)  # type: ignore[arg-type]


def test_an_engine_that_stepped_during_the_probe_is_busy_however_long_the_step() -> None:
    engine, clock, watch = watched(stall_seconds=60)
    engine.num_unfinished_requests = 40
    mark = watch.mark()
    clock.now += 300
    engine.progress += 1
    assert watch.judge_unanswered(mark) is None


def test_an_idle_engine_that_does_not_answer_is_hung() -> None:
    _, clock, watch = watched()
    mark = watch.mark()
    clock.now += 30
    assert watch.judge_unanswered(mark) == "it is idle and did not answer"


def test_a_busy_engine_without_a_step_is_hung_only_after_the_stall_time() -> None:
    engine, clock, watch = watched(stall_seconds=60)
    engine.num_unfinished_requests = 3
    mark = watch.mark()
    clock.now += 30
    assert watch.judge_unanswered(mark) is None
    mark = watch.mark()
    clock.now += 31
    assert watch.judge_unanswered(mark) == "it has made no progress for 61 s with requests pending"


def test_the_stall_time_counts_from_the_last_step_or_the_last_idle_moment() -> None:
    engine, clock, watch = watched(stall_seconds=60)
    clock.now += 500
    watch.check()  # idle for long: not stalled
    engine.num_unfinished_requests = 1
    clock.now += 50
    watch.check()
    assert watch.still_for == 50
    engine.progress += 1
    watch.check()
    clock.now += 20
    assert watch.still_for == 20
