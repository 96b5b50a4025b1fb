"""The engine's load reports for routing between a model's instances: each scheduler report
vLLM's engine core sends (requests running and waiting, KV-cache usage; with several frontend
processes on one core, to one of them a step) written to the engine's `LoadBoard`, which every
frontend process reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from app.core.load_view import LoadBoard
from app.engine.metrics import EngineStepLogger


class LoadReporter(EngineStepLogger):
    """A vLLM stat logger writing each scheduler report to a board (O(1) a report)."""

    def __init__(self, board: LoadBoard) -> None:
        self._board = board

    def scheduled(self, stats: Any) -> None:
        self._board.write(stats.num_running_reqs, stats.num_waiting_reqs, stats.kv_cache_usage)


def load_reporter_factory(board: LoadBoard) -> Callable[[Any, int], StatLoggerBase]:
    """A vLLM `StatLoggerFactory` of reporters to `board`."""

    def factory(vllm_config: Any, engine_index: int = 0) -> StatLoggerBase:
        return LoadReporter(board)

    return factory
