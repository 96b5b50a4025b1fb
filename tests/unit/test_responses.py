"""Response building: deltas per chunk, additional outputs, n > 1 lists, final merge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.chunks import merge_chunks
from app.core.types import CompletionDelta, GenerationChunk
from app.repository.layout import ModelSpec
from app.repository.served_model import ModelState, ServedModel
from app.schemas.generate import GenerateRequest
from app.triton.inputs import body_inputs
from app.triton.outputs import ResponseBuilder
from app.triton.request import StreamPolicy, triton_request
from tests.doubles import FakeEngine

ALL_OUTPUTS = {
    "return_finish_reason": True,
    "return_cumulative_logprob": True,
    "return_logprobs": True,
    "return_num_input_tokens": True,
    "return_num_output_tokens": True,
}


def builder(body: dict[str, Any], stream: bool) -> ResponseBuilder:
    spec = ModelSpec(name="m", version="2", version_path=Path("."), engine_args={})
    model = ServedModel(spec=spec, engine=FakeEngine(), state=ModelState.READY)
    request = triton_request(
        body_inputs(GenerateRequest.model_validate(body)), model, StreamPolicy(default=stream)
    )
    return ResponseBuilder(request, "m", "2")


def delta(
    index: int, text: str, finish: str | None = None, cumulative: float | None = None
) -> CompletionDelta:
    logprobs = [{7: {"logprob": -1.0, "rank": 1, "decoded_token": text}}]
    return CompletionDelta(index, text, 1, cumulative, logprobs, finish)


def test_stream_responses_carry_only_new_text() -> None:
    build = builder({"text_input": "prompt"}, stream=True)
    first = build.build(GenerationChunk([delta(0, "Hel")], 3, False))
    second = build.build(GenerationChunk([delta(0, "lo", "stop")], 3, True))
    assert first == {"model_name": "m", "model_version": "2", "text_output": "Hel"}
    assert second["text_output"] == "lo"


def test_prompt_is_prepended_to_the_first_response_only() -> None:
    build = builder(
        {"text_input": "Q:", "stream": True, "exclude_input_in_output": True}, stream=True
    )
    assert build.build(GenerationChunk([delta(0, "a")], 1, False))["text_output"] == "a"
    final = builder({"text_input": "Q:"}, stream=False).build(
        merge_chunks([GenerationChunk([delta(0, " A")], 1, True)], 1)
    )
    assert final["text_output"] == "Q: A"


def test_every_additional_output_per_event() -> None:
    body = {"text_input": "p", "parameters": {"logprobs": 1}, **ALL_OUTPUTS}
    build = builder(body, stream=True)
    running = build.build(GenerationChunk([delta(0, "a", None, -1.0)], 5, False))
    done = build.build(GenerationChunk([delta(0, "b", "length", -2.0)], 5, True))
    assert running["finish_reason"] is None and done["finish_reason"] == "length"
    assert (running["cumulative_logprob"], done["cumulative_logprob"]) == (-1.0, -2.0)
    assert json.loads(done["logprobs"]) == [
        {"7": {"logprob": -1.0, "rank": 1, "decoded_token": "b"}}
    ]
    assert running["num_input_tokens"] == 5 and done["num_output_tokens"] == 1


def test_logprobs_are_null_text_when_not_requested_in_sampling() -> None:
    build = builder({"text_input": "p", **ALL_OUTPUTS}, stream=True)
    assert build.build(GenerationChunk([delta(0, "a", None, -1.0)], 1, False))["logprobs"] == "null"


def test_n_greater_than_one_gives_lists_and_keeps_missing_completions() -> None:
    body = {"text_input": "p", "parameters": {"n": 2, "temperature": 1}, **ALL_OUTPUTS}
    build = builder(body, stream=True)
    both = build.build(
        GenerationChunk([delta(0, "a", None, -1.0), delta(1, "b", "stop", -3.0)], 1, False)
    )
    only_first = build.build(GenerationChunk([delta(0, "c", "length", -2.0)], 1, True))
    assert both["text_output"] == ["a", "b"]
    assert only_first["text_output"] == ["c", ""]
    assert only_first["finish_reason"] == ["length", "stop"]
    assert only_first["cumulative_logprob"] == [-2.0, -3.0]
    assert only_first["num_output_tokens"] == [1, 0]


def test_merge_joins_text_and_sums_tokens_per_completion() -> None:
    merged = merge_chunks(
        [
            GenerationChunk([delta(0, "a"), delta(1, "x")], 4, False),
            GenerationChunk([delta(1, "y", "stop", -2.0)], 4, False),
            GenerationChunk([delta(0, "b", "length", -1.0)], 4, True),
        ],
        n=2,
    )
    assert [(c.text, c.num_tokens, c.finish_reason) for c in merged.completions] == [
        ("ab", 2, "length"),
        ("xy", 2, "stop"),
    ]
    logprobs = merged.completions[0].logprobs
    assert logprobs is not None and len(logprobs) == 2 and merged.finished
