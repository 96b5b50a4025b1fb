"""How far an engine core has got: a count of the outputs it sent, read by supervision to tell
a busy engine (its count moves, however long each step takes) from a hung one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


class StepCounter:
    """Counts what an `AsyncLLM`'s engine core sends back: one message per engine step that
    produced tokens, finished requests or (with stats on, vLLM's default) scheduler stats."""

    def __init__(self) -> None:
        self.steps = 0

    def watch(self, llm: Any) -> None:
        """Count each message the `AsyncLLM`'s output handler takes from its engine core.

        vLLM's output handler calls `engine_core.get_output_async()` for every message (in
        vLLM 0.25 as in 0.32); the client is wrapped in place, once."""
        core = getattr(llm, "engine_core", None)
        receive: Callable[[], Awaitable[Any]] | None = getattr(core, "get_output_async", None)
        if core is None or receive is None:
            return

        async def counted() -> Any:
            outputs = await receive()
            self.steps += 1
            return outputs

        core.get_output_async = counted
