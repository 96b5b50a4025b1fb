"""The backend's output fields from the core's chunks, in O(new output) per chunk."""

from __future__ import annotations

import json
from typing import Any

from app.core.types import CompletionDelta, GenerationChunk
from app.triton.inputs import TritonRequest


class ResponseBuilder:
    """Formats one request's chunks as the backend's outputs: `text_output` and the
    additional outputs the client asked for.

    Each chunk holds only new output (vLLM's DELTA mode), so a response is built from the
    chunk alone; the only state kept is the last value of per-completion fields that a
    chunk may leave out when `n > 1`. Per-completion fields are lists of `n` values, or,
    with `scalars` (HTTP JSON), single values when `n` is 1. Building one costs O(1)
    whatever `n` says: the request's limits are checked after it is built.
    """

    def __init__(
        self, request: TritonRequest, model_name: str, model_version: str, scalars: bool = True
    ) -> None:
        self._n = request.n
        self._scalar = scalars and self._n == 1
        self._logprobs_requested = request.logprobs_requested
        self._outputs = request.outputs
        self._head = {"model_name": model_name, "model_version": model_version}
        self._prefix = request.text_input if request.prepend_input else ""
        self._finish_reasons: dict[int, str] = {}
        self._cumulative: dict[int, float] = {}

    def build(self, chunk: GenerationChunk) -> dict[str, Any]:
        """The response for one chunk."""
        completions = self._by_index(chunk.completions)
        response: dict[str, Any] = dict(self._head)
        texts = [c.text if c else "" for c in completions]
        if self._prefix:
            texts = [self._prefix + text for text in texts]
            self._prefix = ""
        response["text_output"] = self._shape(texts)
        options = self._outputs
        if options.finish_reason:
            response["finish_reason"] = self._shape(self._each(self._finish_reasons))
        if options.cumulative_logprob:
            response["cumulative_logprob"] = self._shape(self._each(self._cumulative))
        if options.logprobs:
            response["logprobs"] = self._shape([self._logprobs_text(c) for c in completions])
        if options.num_input_tokens:
            response["num_input_tokens"] = chunk.num_prompt_tokens
        if options.num_output_tokens:
            response["num_output_tokens"] = self._shape(
                [c.num_tokens if c else 0 for c in completions]
            )
        return response

    def _by_index(self, completions: list[CompletionDelta]) -> list[CompletionDelta | None]:
        """Completions in index order, None where a chunk left one out; updates kept state."""
        if self._n == 1 and len(completions) == 1:
            ordered: list[CompletionDelta | None] = list(completions)
        else:
            ordered = [None] * self._n
            for delta in completions:
                ordered[delta.index] = delta
        for index, completion in enumerate(ordered):
            if completion is not None:
                if completion.finish_reason is not None:
                    self._finish_reasons[index] = completion.finish_reason
                if completion.cumulative_logprob is not None:
                    self._cumulative[index] = completion.cumulative_logprob
        return ordered

    def _each(self, values: dict[int, Any]) -> list[Any]:
        """A kept per-completion value for each of the `n` completions (None where unset)."""
        return [values.get(index) for index in range(self._n)]

    def _logprobs_text(self, completion: CompletionDelta | None) -> str:
        if not self._logprobs_requested:
            return "null"
        return json.dumps(completion.logprobs if completion and completion.logprobs else [])

    def _shape(self, values: list[Any]) -> Any:
        """A scalar for one completion in JSON, else a list (Triton's one-element tensors)."""
        return values[0] if self._scalar else list(values)
