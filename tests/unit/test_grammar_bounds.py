"""A grammar whose compile runs past the deadline, or out of the worker's memory, is a 400
naming structured_outputs; a worker that cannot start leaves grammars to vLLM's own checks.
The compile is a fake here (app/engine/grammars/check.py runs whatever `check_grammar` is);
tests/unit/test_grammars.py and the real-engine tests compile with vLLM's backends."""

from __future__ import annotations

import logging
import os
import signal
import time
from types import SimpleNamespace
from typing import Any

import pytest

from app.engine.grammars import check as grammar_check_module
from app.engine.grammars import compile as compile_module
from app.engine.grammars.check import GrammarCheck
from app.engine.grammars.compile import CheckJob, CompileState, Verdict, WorkerSetup
from app.engine.worker_pool import WorkerOptions
from app.errors import InvalidRequestError

FIELD = "parameters.structured_outputs"
PARAMS = SimpleNamespace(structured_outputs="a grammar", allowed_token_ids=None)


def fake_setup(worker: WorkerSetup) -> str:
    return "set up"


def failing_setup(worker: WorkerSetup) -> str:
    raise RuntimeError("no tokenizer here")


def slow_compile(state: str, job: CheckJob) -> Verdict:
    time.sleep(3600)
    return Verdict("passed")


def greedy_compile(state: str, job: CheckJob) -> Verdict:
    raise MemoryError


def aborting_compile(state: str, job: CheckJob) -> Verdict:
    """As llguidance's allocator does when it gets no memory."""
    os.kill(os.getpid(), signal.SIGABRT)
    return Verdict("passed")


def passing_compile(state: str, job: CheckJob) -> Verdict:
    return Verdict("passed", backend="xgrammar")


def check_with(
    monkeypatch: pytest.MonkeyPatch, compile_grammar: Any, setup: Any = fake_setup
) -> GrammarCheck:
    monkeypatch.setattr(grammar_check_module, "setup", setup)
    monkeypatch.setattr(grammar_check_module, "check_grammar", compile_grammar)
    llm = SimpleNamespace(vllm_config="the engine's configuration")
    return GrammarCheck(llm, WorkerOptions(workers=1, memory_mb=1024, job_seconds=0.5))


async def refusal_of(check: GrammarCheck) -> InvalidRequestError:
    try:
        with pytest.raises(InvalidRequestError) as raised:
            await check.check(PARAMS, "parameters")
    finally:
        check.close()
    assert raised.value.param == FIELD
    return raised.value


async def test_a_compile_past_the_deadline_is_a_400_naming_structured_outputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    error = await refusal_of(check_with(monkeypatch, slow_compile))
    assert error.message == f"{FIELD}: the grammar is too large to compile within 0.5 s"


@pytest.mark.parametrize("compile_grammar", [greedy_compile, aborting_compile])
async def test_a_compile_out_of_memory_is_a_400_naming_structured_outputs(
    monkeypatch: pytest.MonkeyPatch, compile_grammar: Any
) -> None:
    error = await refusal_of(check_with(monkeypatch, compile_grammar))
    assert error.message == f"{FIELD}: the grammar is too large to compile within 1024 MB"


def nested(depth: int) -> dict[str, Any]:
    """A JSON schema of objects `depth` deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


async def test_a_grammar_nested_too_deeply_to_send_is_a_400_and_the_next_one_compiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A JSON schema nested deeper than pickling reaches (as 400 levels of a request's
    `text.format` once were: a 500 on every route) is refused, not a server error."""
    check = check_with(monkeypatch, passing_compile)
    deep = SimpleNamespace(structured_outputs={"json": nested(5000)}, allowed_token_ids=None)
    try:
        with pytest.raises(InvalidRequestError) as raised:
            await check.check(deep, "parameters")
        await check.check(PARAMS, "parameters")
    finally:
        check.close()
    assert raised.value.param == FIELD
    assert raised.value.message == f"{FIELD}: the grammar is nested too deeply to compile"


async def test_the_first_grammar_that_passes_chooses_the_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check = check_with(monkeypatch, passing_compile)
    try:
        await check.check(PARAMS, "parameters")
    finally:
        check.close()
    assert check._backend_name == "xgrammar"


async def test_a_worker_that_cannot_start_leaves_grammars_to_vllm(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    check = check_with(monkeypatch, passing_compile, failing_setup)
    with caplog.at_level(logging.WARNING):
        await check.check(PARAMS, "parameters")
        await check.check(PARAMS, "parameters")
    assert "no tokenizer here" in caplog.text
    assert caplog.text.count("grammars are not checked") == 1


class OutOfMemoryBackend:
    """xgrammar out of memory: a RuntimeError with C++'s std::bad_alloc."""

    def compile_grammar(self, request_type: Any, spec: str) -> Any:
        raise RuntimeError("std::bad_alloc")


class CheckedParams:
    """Sampling parameters that vLLM's checks pass, with xgrammar chosen."""

    allowed_token_ids = None
    structured_outputs = SimpleNamespace(_backend="xgrammar")

    def clone(self) -> CheckedParams:
        return self

    def verify(self, *args: Any) -> None:
        return None


def test_a_compiler_out_of_memory_is_the_workers_bound_not_the_grammars_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker reports a MemoryError (the 400 above), not the compiler's refusal."""
    monkeypatch.setattr(compile_module, "structured_output_key", lambda params: ("json", "{}"))
    config = SimpleNamespace(
        model_config=None, speculative_config=None, structured_outputs_config=None
    )
    state = CompileState(config, tokenizer=None, backends={"xgrammar": OutOfMemoryBackend()})
    job = CheckJob(CheckedParams(), "parameters", None)
    with pytest.raises(MemoryError, match="bad_alloc"):
        compile_module.check_grammar(state, job)
