"""The backend's outputs from the core's chunks, in O(new output) per chunk: the values of
the outputs a request wants (app/triton/tensors.py), as HTTP's JSON fields or gRPC's
tensors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from app.core.types import CompletionDelta, GenerationChunk
from app.triton.request import TritonRequest
from app.triton.tensors import OUTPUTS, TEXT_OUTPUT, TritonOutput

NULL_TEXT = "null"
OFF_LOOP_POSITIONS = 256
"""Log-probability positions from which a chunk's response is formatted in a worker thread
(a non-streamed response of `n` completions with `logprobs`: 16 x 400 positions of 20 took
0.3 s of JSON text on a 2-core host); a stream's chunks, of a few positions, stay on the loop."""

T = TypeVar("T")


async def formatted(format_chunk: Callable[[GenerationChunk], T], chunk: GenerationChunk) -> T:
    """`format_chunk(chunk)`, in a worker thread where the chunk carries many log-probabilities:
    the interpreter interleaves the event loop (health probes, other streams) with it."""
    if sum(len(c.logprobs or ()) for c in chunk.completions) < OFF_LOOP_POSITIONS:
        return format_chunk(chunk)
    return await asyncio.to_thread(format_chunk, chunk)


class ResponseBuilder:
    """Formats one request's chunks as the backend's outputs: `text_output` and the
    additional outputs the client asked for, in the table's order.

    Each chunk holds only new output (vLLM's DELTA mode), so a response is built from the
    chunk alone; the only state kept is the last value of per-completion outputs that a
    chunk may leave out when `n > 1`. Per-completion outputs are lists of `n` values (or,
    in `fields` with `scalars`, single values when `n` is 1). Building one costs O(1)
    whatever `n` says: the request's limits are checked after it is built.
    """

    def __init__(
        self, request: TritonRequest, model_name: str, model_version: str, scalars: bool = True
    ) -> None:
        self.model_name, self.model_version = model_name, model_version
        self.n = self._n = request.request.n
        self._scalar = scalars and self._n == 1
        wanted = request.request.outputs
        self.outputs = [output for output in OUTPUTS if output.name in wanted]
        """The outputs of every response, in the table's order."""
        self._nulls = {
            output.name
            for output in self.outputs
            if output.needs is not None and output.needs not in request.client_parameters
        }
        self._head = {"model_name": model_name, "model_version": model_version}
        self._prefix = request.text_input if request.prepend_input else ""
        self._kept: dict[str, list[Any]] = {
            output.name: [None] * self._n for output in self.outputs if output.kept
        }
        self._fields = [(output, self._scalar and output.per_completion) for output in self.outputs]
        """Each output with whether its JSON field is a single value."""

    def values(self, chunk: GenerationChunk) -> list[Any]:
        """Each output's value for one chunk: a list of `n` for a per-completion output."""
        completions = self._by_index(chunk.completions)
        values = [self._value(output, chunk, completions) for output in self.outputs]
        self._prefix = ""
        return values

    def build(self, chunk: GenerationChunk) -> dict[str, Any]:
        """The JSON response for one chunk."""
        response: dict[str, Any] = dict(self._head)
        completions = self._by_index(chunk.completions)
        for output, single in self._fields:
            value = self._value(output, chunk, completions)
            response[output.name] = value[0] if single else value
        self._prefix = ""
        return response

    def _value(
        self,
        output: TritonOutput,
        chunk: GenerationChunk,
        completions: list[CompletionDelta] | list[CompletionDelta | None],
    ) -> Any:
        if output is TEXT_OUTPUT:
            prefix = self._prefix
            return [prefix + c.text if c is not None else prefix for c in completions]
        if output.of_request is not None:
            return output.of_request(chunk)
        if output.name in self._nulls:
            return [NULL_TEXT] * self._n
        if output.kept:
            kept = self._kept[output.name]
            for index, completion in enumerate(completions):
                if completion is not None and (value := output.read(completion)) is not None:
                    kept[index] = value
            return list(kept)
        return [output.missing if c is None else output.read(c) for c in completions]

    def _by_index(
        self, completions: list[CompletionDelta]
    ) -> list[CompletionDelta] | list[CompletionDelta | None]:
        """Completions in index order, None where a chunk left one out."""
        if self._n == 1 and len(completions) == 1:
            return completions
        ordered: list[CompletionDelta | None] = [None] * self._n
        for delta in completions:
            ordered[delta.index] = delta
        return ordered
