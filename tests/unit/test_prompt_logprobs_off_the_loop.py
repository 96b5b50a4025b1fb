"""A request's prompt log-probabilities: vLLM's own output processor (run here as it is, on
an engine output made by hand, with the default model's tokenizer) only keeps what the
engine sent, and the request's stream has them decoded in a worker thread, while the loop
goes on serving, into the entries vLLM's processor builds itself."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind
from vllm.tokenizers import get_tokenizer
from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm.v1.engine import logprobs as vllm_logprobs
from vllm.v1.engine.logprobs import LogprobsProcessor
from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector
from vllm.v1.outputs import LogprobsTensors

from app.engine.prompt_logprobs import (
    DeferredPromptLogprobs,
    defer_prompt_logprobs,
    with_prompt_logprobs_built,
)
from app.paths import PROJECT_ROOT
from tests.support.off_loop import ThreadRecord

MODEL = PROJECT_ROOT / ".cache" / "models" / "smollm2"
PROMPT = [19556, 905, 28, 638]
"""The ids of "Hello world, how" in the default model's vocabulary."""
TOP = 3
KINDS = [RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY]

pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="the default model is prepared by make"
)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> ThreadRecord:
    """Where vLLM decoded tokens of log-probabilities."""
    record = ThreadRecord()
    original = vllm_logprobs.convert_ids_list_to_tokens  # type: ignore[attr-defined]
    monkeypatch.setattr(vllm_logprobs, "convert_ids_list_to_tokens", record.wrapping(original))
    return record


@functools.cache
def tokenizer() -> Any:
    return get_tokenizer(str(MODEL))


def output_processor(deferring: bool) -> OutputProcessor:
    processor = OutputProcessor(tokenizer(), log_stats=False)
    if deferring:
        defer_prompt_logprobs(SimpleNamespace(output_processor=processor))
    return processor


def engine_request(kind: RequestOutputKind, prompt_logprobs: int | None) -> EngineCoreRequest:
    params = SamplingParams(max_tokens=1, prompt_logprobs=prompt_logprobs, output_kind=kind)
    request = EngineCoreRequest(
        "request-1", PROMPT, None, params, None, time.time(), None, None, None
    )
    request.external_req_id = "request-1"
    return request


def engine_output() -> EngineCoreOutput:
    """The engine's last output: one new token, and the prompt's log-probabilities (each
    position's own token first, then the top alternatives)."""
    positions = len(PROMPT) - 1
    alternatives = torch.tensor([[7, 8, 9]] * positions)
    token_ids = torch.cat([torch.tensor(PROMPT[1:]).unsqueeze(1), alternatives], dim=1)
    logprobs = -torch.arange(positions * (TOP + 1), dtype=torch.float32).reshape(positions, -1)
    ranks = torch.arange(1, positions + 1)
    return EngineCoreOutput(
        "request-1",
        [29],
        new_prompt_logprobs_tensors=LogprobsTensors(token_ids, logprobs, ranks),
        finish_reason=FinishReason.LENGTH,
    )


def processed(processor: OutputProcessor, kind: RequestOutputKind) -> RequestOutputCollector:
    """The request's collector once `processor` took the request and the engine's output."""
    collector = RequestOutputCollector(kind, "request-1")
    processor.add_request(engine_request(kind, TOP), None, None, 0, collector)
    processor.process_outputs([engine_output()])
    return collector


def entries(prompt_logprobs: Any) -> list[Any]:
    """Each position's alternatives as (log-probability, rank, text) by token."""
    return [None if entry is None else alternatives(entry) for entry in prompt_logprobs]


def alternatives(entry: dict[int, Any]) -> dict[int, tuple[float, int, str]]:
    return {token: (p.logprob, p.rank, p.decoded_token) for token, p in entry.items()}


def first_output(collector: RequestOutputCollector) -> Any:
    """The request's output (a `RequestOutput`)."""
    return collector.get_nowait()


async def streamed(collector: RequestOutputCollector) -> AsyncGenerator[Any, None]:
    yield first_output(collector)


@pytest.mark.parametrize("kind", KINDS, ids=["delta", "final-only"])
async def test_prompt_logprobs_are_decoded_in_a_worker_thread_while_the_loop_turns(
    decodes: ThreadRecord, kind: RequestOutputKind
) -> None:
    expected = first_output(processed(output_processor(deferring=False), kind))
    decodes.threads.clear()
    collector = processed(output_processor(deferring=True), kind)
    assert decodes.threads == []  # the output processor (on the loop) decoded nothing

    async def loop_turns() -> None:
        await asyncio.sleep(0.05)
        decodes.loop_turned.set()

    turning = asyncio.create_task(loop_turns())
    outputs = [output async for output in with_prompt_logprobs_built(streamed(collector))]
    await turning

    assert threading.main_thread() not in decodes.threads
    assert decodes.loop_ran == [True]
    assert entries(outputs[0].prompt_logprobs) == entries(expected.prompt_logprobs)
    assert entries(outputs[0].prompt_logprobs)[1][PROMPT[1]][2] == " world"
    assert outputs[0].outputs[0].token_ids == expected.outputs[0].token_ids


def test_the_output_keeps_what_the_engine_sent_until_it_is_built(decodes: ThreadRecord) -> None:
    collector = processed(output_processor(deferring=True), RequestOutputKind.DELTA)
    deferred = first_output(collector).prompt_logprobs
    assert isinstance(deferred, DeferredPromptLogprobs)
    assert len(entries(deferred.built())) == len(PROMPT)
    assert decodes.threads == [threading.main_thread()]  # built where it was asked


def test_a_request_without_prompt_logprobs_keeps_vllms_processor() -> None:
    processor = output_processor(deferring=True)
    kind = RequestOutputKind.DELTA
    processor.add_request(engine_request(kind, None), None, None, 0, None)
    assert type(processor.request_states["request-1"].logprobs_processor) is LogprobsProcessor
