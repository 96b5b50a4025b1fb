"""A request's prompt log-probabilities decoded in a worker thread, not on the event loop.

vLLM's output processor (in `AsyncLLM`, on the frontend's event loop) decodes every token of
a request's prompt log-probabilities when its prefill ends: `prompt_logprobs: 20` over a
2,000-token prompt is 42,000 tokens, some 0.4 s in which no other request of the process
moves. Here the output processor only keeps what the engine sent (`DeferredPromptLogprobs`),
and the request's stream (`with_prompt_logprobs_built`) has vLLM's own code decode it in a
worker thread before the output is handed on: the same entries, built elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from vllm.v1.engine.logprobs import LogprobsProcessor
from vllm.v1.engine.output_processor import OutputProcessor

__all__ = [
    "DeferredPromptLogprobs",
    "DeferringOutputProcessor",
    "defer_prompt_logprobs",
    "with_prompt_logprobs_built",
]


class DeferredPromptLogprobs:
    """A request's prompt log-probabilities as its output processor holds them: the entries it
    built already (`decoded`, vLLM's list) and the engine's tensors not decoded yet."""

    def __init__(self, processor: LogprobsProcessor, decoded: Any) -> None:
        self._state = dict(processor.__dict__)
        self._decoded = decoded
        self._chunks: list[Any] = []

    def add(self, tensors: Any) -> None:
        self._chunks.append(tensors)

    def __bool__(self) -> bool:
        """As vLLM's list is read: whether there is anything to hand on."""
        return bool(self._decoded) or bool(self._chunks)

    def built(self) -> Any:
        """The entries, as vLLM's output processor builds them (slow: run off the loop)."""
        builder = object.__new__(LogprobsProcessor)
        builder.__dict__.update(self._state)
        builder.prompt_logprobs = self._decoded
        for tensors in self._chunks:
            builder._update_prompt_logprobs(tensors)
        return builder.prompt_logprobs


class DeferringLogprobsProcessor(LogprobsProcessor):
    """vLLM's `LogprobsProcessor` that keeps the engine's prompt log-probabilities to be
    decoded later (`prompt_logprobs` is a `DeferredPromptLogprobs`)."""

    def _update_prompt_logprobs(self, prompt_logprobs_tensors: Any) -> None:
        deferred: Any = self.prompt_logprobs
        if not isinstance(deferred, DeferredPromptLogprobs):
            deferred = DeferredPromptLogprobs(self, deferred)
            self.prompt_logprobs = deferred
        deferred.add(prompt_logprobs_tensors)


class DeferringOutputProcessor(OutputProcessor):
    """vLLM's `OutputProcessor` whose requests with prompt log-probabilities keep them to be
    decoded later. `AsyncLLM` builds its processor itself: `defer_prompt_logprobs` gives it
    this class."""

    def add_request(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().add_request(request, *args, **kwargs)
        state = self.request_states.get(request.request_id)
        processor = getattr(state, "logprobs_processor", None)
        if type(processor) is LogprobsProcessor and processor.num_prompt_logprobs is not None:
            processor.__class__ = DeferringLogprobsProcessor


def defer_prompt_logprobs(llm: Any) -> None:
    """Have `llm`'s (an `AsyncLLM`'s) output processor keep prompt log-probabilities for
    `with_prompt_logprobs_built`; a release whose processor is not vLLM's class keeps its own."""
    processor = getattr(llm, "output_processor", None)
    if type(processor) is OutputProcessor:
        processor.__class__ = DeferringOutputProcessor


async def with_prompt_logprobs_built(
    outputs: AsyncGenerator[Any, None],
) -> AsyncGenerator[Any, None]:
    """`outputs` (an engine request's) with their prompt log-probabilities decoded in a worker
    thread; closing this closes (aborts) `outputs`."""
    async with aclosing(outputs):
        async for output in outputs:
            deferred = getattr(output, "prompt_logprobs", None)
            if isinstance(deferred, DeferredPromptLogprobs):
                output.prompt_logprobs = await asyncio.to_thread(deferred.built)
            yield output
