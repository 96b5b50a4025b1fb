"""Requests that outlive their engine, without an engine: the bookkeeping of what a request
produced (app/core/migration.py) and its resumption on a replacement `AsyncLLM`
(app/engine/resuming_client.py), against scripted engines that die on cue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from vllm import SamplingParams
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
from vllm.v1.engine.exceptions import EngineDeadError

from app.core.migration import RequestProgress
from app.engine.resuming_client import ResumingRequest, merged
from app.errors import EngineFaultError

PROMPT = {"prompt": "one two three four"}
PROMPT_IDS = [3, 3, 5, 4]
TOKEN_LOGPROB = -0.25


def next_token(context: list[int]) -> int:
    """Greedy decoding in miniature: the next token follows from the context alone."""
    return (len(context) * 7 + sum(context)) % 1000


@dataclass
class Call:
    prompt: Any
    params: SamplingParams
    request_id: str
    kwargs: dict[str, Any]


class ScriptedLLM:
    """An `AsyncLLM` stand-in: DELTA outputs of one token per step per completion; dies (every
    running request gets `EngineDeadError`) once it has produced `dies_after` tokens."""

    def __init__(self, dies_after: int | None = None) -> None:
        self.dies_after = dies_after
        self.produced = 0
        self.calls: list[Call] = []
        self.dead = False

    async def engine_generate(
        self, prompt: Any, params: SamplingParams, request_id: str, **kwargs: Any
    ) -> AsyncIterator[RequestOutput]:
        assert params.output_kind == RequestOutputKind.DELTA, (
            "the engine is always asked for deltas"
        )
        self.calls.append(Call(prompt, params, request_id, kwargs))
        prompt_ids = prompt.get("prompt_token_ids") or [
            len(word) for word in prompt["prompt"].split()
        ]
        max_tokens = params.max_tokens
        assert max_tokens is not None, "the engine is always given max_tokens"
        contexts = [list(prompt_ids) for _ in range(params.n)]
        cumulative = [0.0] * params.n
        for step in range(max_tokens):
            await asyncio.sleep(0)
            if self.dead or (self.dies_after is not None and self.produced >= self.dies_after):
                self.dead = True
                raise EngineDeadError()
            completions = []
            for index, context in enumerate(contexts):
                token = next_token(context)
                context.append(token)
                cumulative[index] += TOKEN_LOGPROB
                last = step == max_tokens - 1
                completions.append(
                    CompletionOutput(
                        index=index,
                        text=f"t{token} ",
                        token_ids=[token],
                        cumulative_logprob=cumulative[index]
                        if params.logprobs is not None
                        else None,
                        logprobs=None,
                        finish_reason="length" if last else None,
                    )
                )
                self.produced += 1
            yield RequestOutput(
                request_id,
                "the prompt",
                list(prompt_ids),
                None,
                completions,
                finished=step == max_tokens - 1,
            )


@dataclass
class ScriptedEngine:
    """A `VllmEngine` as the resuming client sees it."""

    llm: ScriptedLLM | None
    handover: Any = None
    tracked: dict[str, set[str]] = field(default_factory=dict)
    ever_tracked: set[str] = field(default_factory=set)

    def track(self, admitted_id: str, engine_ids: Iterable[str]) -> None:
        self.tracked.setdefault(admitted_id, set()).update(engine_ids)
        self.ever_tracked.update(engine_ids)

    def untrack(self, admitted_id: str, engine_ids: Iterable[str]) -> None:
        self.tracked.get(admitted_id, set()).difference_update(engine_ids)


class Succession:
    """Hands over the next engine of a list for each failure (None once they run out)."""

    def __init__(self, *engines: ScriptedEngine | None) -> None:
        self.engines = list(engines)
        self.asked: list[ScriptedEngine] = []
        self.migrations = 0

    async def replacement(self, failed: Any) -> Any:
        self.asked.append(failed)
        engine = self.engines.pop(0) if self.engines else None
        if engine is not None:
            engine.handover = self
        return engine

    def count_migration(self) -> None:
        self.migrations += 1


def params(
    max_tokens: int = 16, kind: RequestOutputKind = RequestOutputKind.DELTA, **values: Any
) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, output_kind=kind, **values)


def calls_of(engine: ScriptedEngine) -> list[Call]:
    """The calls of an engine's AsyncLLM."""
    assert engine.llm is not None
    return engine.llm.calls


def engines(*dies_after: int | None) -> tuple[ScriptedEngine, list[ScriptedEngine], Succession]:
    first, *rest = [ScriptedEngine(ScriptedLLM(d)) for d in dies_after]
    succession = Succession(*rest)
    first.handover = succession
    return first, rest, succession


def run(
    engine: ScriptedEngine, sampling: SamplingParams, prompt: Any = PROMPT, request_id: str = "req"
) -> list[RequestOutput]:
    async def collect() -> list[RequestOutput]:
        request = ResumingRequest(
            engine, "admitted", prompt, sampling, request_id, {"lora_request": None}
        )
        return [output async for output in request.outputs()]

    return asyncio.run(collect())


def uninterrupted(max_tokens: int, prompt_ids: list[int] = PROMPT_IDS) -> list[int]:
    context = list(prompt_ids)
    for _ in range(max_tokens):
        context.append(next_token(context))
    return context[len(prompt_ids) :]


def tokens_of(outputs: list[RequestOutput], index: int = 0) -> list[int]:
    return [
        t for output in outputs for c in output.outputs if c.index == index for t in c.token_ids
    ]


def test_a_stream_resumes_where_it_stopped_and_reads_as_one_request() -> None:
    first, (second,), succession = engines(5, None)
    outputs = run(first, params(16, logprobs=0))
    assert tokens_of(outputs) == uninterrupted(16)
    assert "".join(c.text for o in outputs for c in o.outputs) == "".join(
        f"t{t} " for t in uninterrupted(16)
    )
    assert [o.finished for o in outputs] == [False] * 15 + [True]
    assert outputs[-1].outputs[0].finish_reason == "length"
    assert all(o.request_id == "req" and o.prompt_token_ids == PROMPT_IDS for o in outputs)
    assert [o.outputs[0].cumulative_logprob for o in outputs] == [
        TOKEN_LOGPROB * (i + 1) for i in range(16)
    ]
    (call,) = calls_of(second)
    assert call.prompt == {"prompt_token_ids": PROMPT_IDS + uninterrupted(5)}
    assert (call.params.n, call.params.max_tokens, call.request_id) == (1, 11, "req")
    assert call.kwargs == {"lora_request": None}
    assert succession.asked == [first] and succession.migrations == 1
    assert second.ever_tracked == {"req"} and second.tracked == {"admitted": set()}


def test_a_final_only_request_runs_as_deltas_and_answers_once() -> None:
    first, _, _ = engines(7, None)
    (output,) = run(first, params(12, RequestOutputKind.FINAL_ONLY))
    assert output.finished and output.outputs[0].token_ids == uninterrupted(12)
    assert output.outputs[0].text == "".join(f"t{t} " for t in uninterrupted(12))
    assert output.prompt_token_ids == PROMPT_IDS


def test_n_completions_resume_each_on_its_own_with_the_seed_offset() -> None:
    first, (second,), succession = engines(6, None)  # 3 steps of 2 completions
    outputs = run(first, params(10, RequestOutputKind.FINAL_ONLY, n=2, seed=40))
    (output,) = outputs
    assert [c.index for c in output.outputs] == [0, 1]
    assert all(list(c.token_ids) == uninterrupted(10) for c in output.outputs)
    calls = calls_of(second)
    assert sorted(c.request_id for c in calls) == ["req-n0", "req-n1"]
    assert {(c.params.n, c.params.max_tokens, c.params.seed) for c in calls} == {(1, 7, 43)}
    assert succession.migrations == 1


def test_a_request_the_engine_died_on_twice_without_a_token_between_ends_with_the_error() -> None:
    first, _, succession = engines(4, 0, None)
    with pytest.raises(EngineFaultError, match="failed twice while running this request"):
        run(first, params(16))
    assert succession.migrations == 1 and len(succession.asked) == 1  # not asked again


def test_a_request_the_engine_died_on_twice_before_its_first_token_ends_with_the_error() -> None:
    """A request that kills every engine it starts on (before any output) is not retried on
    each replacement until the restarts are spent: the second death ends it."""
    first, _, succession = engines(0, 0, None)
    with pytest.raises(EngineFaultError):
        run(first, params(16))
    assert succession.migrations == 1 and len(succession.asked) == 1


def test_a_request_running_at_two_engine_deaths_in_a_row_ends_with_an_engine_fault() -> None:
    """Even one that produced tokens on the replacement: a seeded step that kills the engine
    would kill each replacement it resumed on, and every request with it."""
    first, _, succession = engines(4, 3, None)
    with pytest.raises(EngineFaultError):
        run(first, params(16))
    assert succession.migrations == 1 and succession.asked == [first]


def test_of_the_requests_at_a_second_death_only_those_at_the_first_end_the_others_resume() -> None:
    first, (second, third), succession = engines(4, 10, None)

    async def both() -> tuple[Any, Any]:
        resumed = ResumingRequest(first, "a", PROMPT, params(16), "resumed", {})
        started = asyncio.Event()

        async def read(request: ResumingRequest) -> list[RequestOutput]:
            return [output async for output in request.outputs()]

        async def later() -> list[RequestOutput]:
            await started.wait()
            return await read(ResumingRequest(second, "b", PROMPT, params(16), "new", {}))

        async def first_then_signal() -> list[RequestOutput]:
            outputs = []
            async for output in resumed.outputs():
                outputs.append(output)
                if succession.migrations:
                    started.set()
            return outputs

        return await asyncio.gather(first_then_signal(), later(), return_exceptions=True)

    resumed_result, new_result = asyncio.run(both())
    assert isinstance(resumed_result, EngineFaultError)
    assert tokens_of(new_result) == uninterrupted(16)
    assert succession.asked == [first, second] and succession.migrations == 2
    assert {call.request_id for call in calls_of(third)} == {"new"}


def test_without_a_replacement_the_request_ends_with_the_engines_error() -> None:
    first, _, succession = engines(4)
    with pytest.raises(EngineDeadError):
        run(first, params(16))
    assert succession.asked == [first] and succession.migrations == 0


def test_without_a_handover_nothing_waits() -> None:
    engine = ScriptedEngine(ScriptedLLM(4))
    with pytest.raises(EngineDeadError):
        run(engine, params(16))


def test_a_request_that_produced_nothing_starts_again_as_it_was() -> None:
    first, (second,), _ = engines(0, None)
    grammar = StructuredOutputsParams(regex="[a-z]+")
    outputs = run(first, params(6, structured_outputs=grammar))
    assert tokens_of(outputs) == uninterrupted(6)
    (call,) = calls_of(second)
    assert call.prompt == PROMPT and call.params.max_tokens == 6


@pytest.mark.parametrize(
    ("prompt", "values"),
    [
        (PROMPT, {"structured_outputs": StructuredOutputsParams(regex="[a-z]+")}),
        ({**PROMPT, "multi_modal_data": {"image": ["..."]}}, {}),
        ({"type": "embeds", "prompt": "x"}, {}),
    ],
)
def test_grammars_images_and_embeddings_do_not_resume_once_started(
    prompt: Any, values: dict[str, Any]
) -> None:
    first, _, succession = engines(3, None)
    with pytest.raises(EngineDeadError):
        run(first, params(8, **values), prompt=prompt)
    assert succession.asked == []


def test_closing_the_stream_closes_the_resumed_engine_requests() -> None:
    first, (second,), _ = engines(3, None)

    async def read_five() -> None:
        request = ResumingRequest(first, "admitted", PROMPT, params(16), "req", {})
        outputs = request.outputs()
        for _ in range(5):
            await anext(outputs)
        await outputs.aclose()

    asyncio.run(read_five())
    assert second.tracked == {"admitted": set()}


def test_progress_counts_each_completion_and_knows_when_it_cannot_resume() -> None:
    progress = RequestProgress(n=2, max_tokens=10, min_tokens=4, seed=None)
    assert progress.restarts_whole() and progress.can_resume()
    progress.record(0, [1, 2, 3], -1.0, False)
    progress.record(1, [4], -0.5, True)
    (resumption,) = progress.resumptions()
    assert (
        resumption.index,
        resumption.token_ids,
        resumption.max_tokens,
        resumption.min_tokens,
    ) == (0, [1, 2, 3], 7, 1)
    progress.resumed()
    assert not progress.can_resume()
    assert progress.record(0, [5], -0.25, False) == -1.25
    assert not progress.can_resume()


def test_merged_streams_interleave_and_close_together() -> None:
    closed: list[int] = []

    async def numbers(start: int) -> AsyncGenerator[int, None]:
        try:
            for value in range(start, start + 3):
                await asyncio.sleep(0)
                yield value
        finally:
            closed.append(start)

    async def collect() -> list[int]:
        return [value async for value in merged([numbers(0), numbers(10)])]

    assert sorted(asyncio.run(collect())) == [0, 1, 2, 10, 11, 12]
    assert sorted(closed) == [0, 10]
