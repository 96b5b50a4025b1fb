"""The backend's inputs and outputs: the one table of Triton's tensor names. Every frontend
reads it (the HTTP body's fields, gRPC's tensors), the model metadata and config list it,
the responses are made from it, and the docs are checked against it.

An output is one row here: its name, its KServe datatype, whether it holds a value per
completion or one per request, and how it is read from the core's chunks. Its `return_*`
input follows from it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.types import CompletionDelta, GenerationChunk

BYTES, BOOL, FP32, UINT32 = "BYTES", "BOOL", "FP32", "UINT32"
"""KServe datatypes (config.pbtxt's TYPE_STRING is BYTES)."""


@dataclass(frozen=True, slots=True)
class TritonInput:
    """One input of the backend's models."""

    name: str
    datatype: str
    dims: tuple[int, ...] = (1,)
    """-1: any number of elements."""
    optional: bool = True


@dataclass(frozen=True, slots=True)
class TritonOutput:
    """One output of the backend's models: per completion (`read` of each completion, `kept`
    from the last chunk that had it, `missing` for one a chunk left out) or, without `read`,
    one value per request (`of_request`)."""

    name: str
    datatype: str
    read: Callable[[CompletionDelta], Any] = lambda completion: None
    missing: Any = None
    kept: bool = False
    """A chunk without a value leaves the previous one (finish reason, cumulative logprob)."""
    of_request: Callable[[GenerationChunk], Any] | None = None
    needs: str | None = None
    """A sampling parameter without which the backend answers the JSON text "null"."""
    sampling_defaults: tuple[tuple[str, Any], ...] = ()
    """Sampling values the engine needs to produce it, where the client set none."""

    @property
    def flag(self) -> str:
        """The input that asks for this output."""
        return f"return_{self.name}"

    @property
    def per_completion(self) -> bool:
        return self.of_request is None

    @property
    def dims(self) -> tuple[int, ...]:
        return (-1,) if self.per_completion else (1,)


def logprobs_json(completion: CompletionDelta) -> str:
    """The backend's JSON text of the new tokens' logprobs."""
    return json.dumps(completion.logprobs or [])


TEXT_OUTPUT = TritonOutput("text_output", BYTES, missing="")
"""Always produced (each completion's new text, after the prompt where it is echoed: the
response builder's); the others when their `return_*` input is true."""
OUTPUTS: tuple[TritonOutput, ...] = (
    TEXT_OUTPUT,
    TritonOutput("finish_reason", BYTES, lambda c: c.finish_reason, kept=True),
    TritonOutput(
        "cumulative_logprob",
        FP32,
        lambda c: c.cumulative_logprob,
        kept=True,
        sampling_defaults=(("logprobs", 0),),  # vLLM sums the sampled tokens' logprobs only then
    ),
    TritonOutput("logprobs", BYTES, logprobs_json, missing="[]", needs="logprobs"),
    TritonOutput("num_input_tokens", UINT32, of_request=lambda chunk: chunk.num_prompt_tokens),
    TritonOutput("num_output_tokens", UINT32, lambda c: c.num_tokens, missing=0),
)
RETURN_FLAGS = {output.flag: output.name for output in OUTPUTS if output is not TEXT_OUTPUT}
"""`return_*` input -> the output it asks for."""

INPUTS: tuple[TritonInput, ...] = (
    TritonInput("text_input", BYTES, optional=False),
    TritonInput("image", BYTES, (-1,)),
    TritonInput("stream", BOOL),
    TritonInput("sampling_parameters", BYTES),
    TritonInput("exclude_input_in_output", BOOL),
    *(TritonInput(flag, BOOL) for flag in RETURN_FLAGS),
)
INPUT_NAMES = frozenset(tensor.name for tensor in INPUTS)
OUTPUT_NAMES = frozenset(output.name for output in OUTPUTS)
BACKEND_PARAMETERS = ("stream", "lora_name", "apply_chat_template")
"""Keys of the sampling parameters that the backend reads itself (never vLLM's)."""


def outputs_asked(flags: dict[str, Any]) -> frozenset[str]:
    """The outputs a request's inputs ask for: `text_output`, and one per true `return_*`."""
    return frozenset(
        {TEXT_OUTPUT.name, *(name for flag, name in RETURN_FLAGS.items() if flags.get(flag))}
    )
