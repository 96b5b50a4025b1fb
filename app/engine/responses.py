"""Builds the backend's response objects from engine chunks, in O(new output) per chunk."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from app.engine.translate import GenerationPlan
from app.engine.types import CompletionDelta, GenerationChunk


class ResponseBuilder:
    """Formats one request's chunks as Triton responses.

    Each chunk holds only new output (vLLM's DELTA mode), so a response is built from the
    chunk alone; the only state kept is the last value of per-completion fields that a
    chunk may leave out when `n > 1`.
    """

    def __init__(self, plan: GenerationPlan, model_name: str, model_version: str) -> None:
        self._plan = plan
        self._outputs = plan.outputs
        self._head = {"model_name": model_name, "model_version": model_version}
        self._prefix = plan.text_input if plan.prepend_input else ""
        self._finish_reasons: list[str | None] = [None] * plan.n
        self._cumulative: list[float | None] = [None] * plan.n

    def build(self, chunk: GenerationChunk) -> dict[str, Any]:
        """The response for one chunk."""
        completions = self._by_index(chunk.completions)
        response = dict(self._head)
        texts = [c.text if c else "" for c in completions]
        if self._prefix:
            texts = [self._prefix + text for text in texts]
            self._prefix = ""
        response["text_output"] = self._shape(texts)
        options = self._outputs
        if options.finish_reason:
            response["finish_reason"] = self._shape(self._finish_reasons)
        if options.cumulative_logprob:
            response["cumulative_logprob"] = self._shape(self._cumulative)
        if options.logprobs:
            response["logprobs"] = self._shape([self._logprobs_text(c) for c in completions])
        if options.num_input_tokens:
            response["num_input_tokens"] = chunk.num_prompt_tokens
        if options.num_output_tokens:
            response["num_output_tokens"] = self._shape([c.num_tokens if c else 0 for c in completions])
        return response

    def build_final(self, chunks: Iterable[GenerationChunk]) -> dict[str, Any]:
        """One response for a whole request (`stream: false`)."""
        return self.build(merge_chunks(chunks, self._plan.n))

    def _by_index(self, completions: list[CompletionDelta]) -> list[CompletionDelta | None]:
        """Completions in index order, None where a chunk left one out; updates kept state."""
        if self._plan.n == 1 and len(completions) == 1:
            ordered: list[CompletionDelta | None] = list(completions)
        else:
            ordered = [None] * self._plan.n
            for completion in completions:
                ordered[completion.index] = completion
        for index, completion in enumerate(ordered):
            if completion is not None:
                if completion.finish_reason is not None:
                    self._finish_reasons[index] = completion.finish_reason
                if completion.cumulative_logprob is not None:
                    self._cumulative[index] = completion.cumulative_logprob
        return ordered

    def _logprobs_text(self, completion: CompletionDelta | None) -> str:
        if not self._plan.logprobs_requested:
            return "null"
        return json.dumps(completion.logprobs if completion and completion.logprobs else [])

    def _shape(self, values: list[Any]) -> Any:
        """A scalar for one completion, a list for several (Triton's one-element tensors)."""
        return values[0] if self._plan.n == 1 else values


def merge_chunks(chunks: Iterable[GenerationChunk], n: int) -> GenerationChunk:
    """Fold a request's chunks into one, joining each completion's text once at the end."""
    texts: list[list[str]] = [[] for _ in range(n)]
    merged = [CompletionDelta(index=i, text="", num_tokens=0) for i in range(n)]
    num_prompt_tokens = 0
    finished = False
    for chunk in chunks:
        num_prompt_tokens = chunk.num_prompt_tokens or num_prompt_tokens
        finished = chunk.finished
        for delta in chunk.completions:
            target = merged[delta.index]
            texts[delta.index].append(delta.text)
            target.num_tokens += delta.num_tokens
            if delta.logprobs is not None:
                if target.logprobs is None:
                    target.logprobs = []
                target.logprobs.extend(delta.logprobs)
            target.cumulative_logprob = first_not_none(delta.cumulative_logprob, target.cumulative_logprob)
            target.finish_reason = first_not_none(delta.finish_reason, target.finish_reason)
    for target, parts in zip(merged, texts):
        target.text = "".join(parts)
    return GenerationChunk(completions=merged, num_prompt_tokens=num_prompt_tokens, finished=finished)


def first_not_none(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)

