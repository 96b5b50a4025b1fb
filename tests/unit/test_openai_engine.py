"""The vLLM adapter's side of the OpenAI API without an engine: config.pbtxt options, vLLM's
errors as the server's, and the guarded engine client vLLM's serving classes run on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

from app.core.guard import RequestGuard
from app.core.limits import RequestLimits
from app.engine.vllm_engine import VllmEngine
from app.engine.vllm_openai.acceptance import AcceptanceKey, acceptance_key
from app.engine.vllm_openai.bodies import parse
from app.engine.vllm_openai.compat import (
    ChatCompletionRequest,
    CompletionRequest,
    create_error_response,
)
from app.engine.vllm_openai.errors import as_server_error
from app.engine.vllm_openai.guarded_request import EngineRequests, GuardedRequest
from app.engine.vllm_openai.options import OpenAIOptions, engine_reasoning_parser, openai_options
from app.errors import (
    InvalidRequestError,
    ModelConfigError,
    ModelNotFoundError,
    NotSupportedError,
    OverloadedError,
    RequestTimeoutError,
    ServerError,
)
from app.repository.layout import load_repository
from tests.support.repository import write_model


def spec_with(tmp_path: Path, parameters: dict[str, str], **engine_args: Any):
    entries = "\n".join(
        f"parameters: {{ key: \"{key}\" value: {{ string_value: '{value}' }} }}"
        for key, value in parameters.items()
    )
    write_model(tmp_path / "repo", "m", config=entries, **(engine_args or {"model": str(tmp_path)}))
    (spec,) = load_repository(tmp_path / "repo")
    return spec


def test_options_default_to_vllms_flags(tmp_path: Path) -> None:
    assert openai_options(spec_with(tmp_path, {"REPORT_CUSTOM_METRICS": "true"})) == OpenAIOptions()


def test_options_are_read_from_config_pbtxt(tmp_path: Path) -> None:
    options = openai_options(
        spec_with(
            tmp_path,
            {
                "OPENAI_TOOL_CALL_PARSER": "pythonic",
                "OPENAI_ENABLE_AUTO_TOOL_CHOICE": "true",
                "OPENAI_DEFAULT_CHAT_TEMPLATE_KWARGS": '{"enable_thinking": false}',
                "OPENAI_CHAT_TEMPLATE": "{{ messages[0].content }}",
                "OPENAI_RESPONSE_ROLE": "bot",
            },
        )
    )
    assert options.tool_call_parser == "pythonic" and options.enable_auto_tool_choice
    assert options.default_chat_template_kwargs == {"enable_thinking": False}
    assert options.chat_template == "{{ messages[0].content }}" and options.response_role == "bot"


def test_chat_template_files_are_found_from_the_model_folder(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, {"OPENAI_CHAT_TEMPLATE": "template.jinja"})
    with pytest.raises(ModelConfigError, match="OPENAI_CHAT_TEMPLATE: no such file"):
        openai_options(spec)
    (tmp_path / "repo" / "m" / "template.jinja").write_text("{{ messages }}")
    assert openai_options(spec).chat_template == str(tmp_path / "repo" / "m" / "template.jinja")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"OPENAI_TOOL_PARSER": "hermes"},
            "unknown parameter 'OPENAI_TOOL_PARSER' (did you mean 'OPENAI_TOOL_CALL_PARSER'?)",
        ),
        ({"OPENAI_ENABLE_AUTO_TOOL_CHOICE": "maybe"}, "parameter 'OPENAI_ENABLE_AUTO_TOOL_CHOICE'"),
        (
            {"OPENAI_CHAT_TEMPLATE_CONTENT_FORMAT": "xml"},
            "parameter 'OPENAI_CHAT_TEMPLATE_CONTENT_FORMAT'",
        ),
        (
            {"OPENAI_DEFAULT_CHAT_TEMPLATE_KWARGS": "{bad"},
            "parameter 'OPENAI_DEFAULT_CHAT_TEMPLATE_KWARGS'",
        ),
        (
            {"OPENAI_TOOL_CALL_PARSER": "no_such_parser"},
            "no tool-call parser 'no_such_parser' (known: ",
        ),
        (
            {"OPENAI_ENABLE_AUTO_TOOL_CHOICE": "true"},
            "OPENAI_ENABLE_AUTO_TOOL_CHOICE needs OPENAI_TOOL_CALL_PARSER",
        ),
    ],
)
def test_bad_options_fail_when_the_engine_is_made(
    tmp_path: Path, parameters: dict[str, str], message: str
) -> None:
    spec = spec_with(tmp_path, parameters)
    with pytest.raises(ModelConfigError, match=r"config\.pbtxt") as raised:
        VllmEngine(spec)
    assert message in str(raised.value)


def test_one_reasoning_parser_for_engine_and_api(tmp_path: Path) -> None:
    options = OpenAIOptions(reasoning_parser="deepseek_r1")
    assert engine_reasoning_parser(options, {}, tmp_path) == "deepseek_r1"
    assert (
        engine_reasoning_parser(OpenAIOptions(), {"reasoning_parser": "qwen3"}, tmp_path) == "qwen3"
    )
    with pytest.raises(ModelConfigError, match="differs"):
        engine_reasoning_parser(options, {"reasoning_parser": "qwen3"}, tmp_path)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, InvalidRequestError),
        (404, ModelNotFoundError),
        (501, NotSupportedError),
        (503, OverloadedError),
        (504, RequestTimeoutError),
        (500, ServerError),
        (418, InvalidRequestError),
    ],
)
def test_vllm_error_responses_become_the_servers_errors(
    status: int, error: type[ServerError]
) -> None:
    response = create_error_response("boom", status_code=HTTPStatus(status), param="top_k")
    converted = as_server_error(response)
    assert type(converted) is error and converted.message == "boom" and converted.param == "top_k"


def test_bodies_are_read_by_vllms_models_with_the_field_named() -> None:
    with pytest.raises(InvalidRequestError) as raised:
        parse(CompletionRequest, {"prompt": "x", "max_tokens": "many"})
    assert raised.value.param == "max_tokens" and raised.value.message.startswith("max_tokens:")
    with pytest.raises(InvalidRequestError) as raised:  # a vLLM validator raising its own error
        parse(
            ChatCompletionRequest,
            {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"},
        )
    assert raised.value.param == "tool_choice"


CHAT = {"messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize(
    ("request_class", "body", "param"),
    [
        (CompletionRequest, {"prompt": "x", "structured_outputs": []}, "structured_outputs"),
        (ChatCompletionRequest, {**CHAT, "structured_outputs": ["a"]}, "structured_outputs"),
        (
            ChatCompletionRequest,
            {**CHAT, "tool_choice": {"type": "function", "function": {"name": "f"}}, "tools": "x"},
            "tools",
        ),
        (ChatCompletionRequest, {**CHAT, "response_format": [1]}, "response_format"),
    ],
)
def test_a_field_of_the_wrong_type_is_a_400_naming_it_where_vllms_validators_crash(
    request_class: Any, body: dict[str, Any], param: str
) -> None:
    """Found by schemathesis: vLLM's "before" validators raised AttributeError (a 500) on
    `structured_outputs: []`, and named no field for `tools: "x"`."""
    with pytest.raises(InvalidRequestError) as raised:
        parse(request_class, body)
    assert raised.value.param == param and raised.value.message.startswith(f"{param}:")


class FakeLLM:
    """The `AcceptingAsyncLLM` surface the guarded client uses: generate (the request taken,
    then one token per step), abort."""

    def __init__(self, steps: int = 3, delay: float = 0.0) -> None:
        self.steps, self.delay = steps, delay
        self.model_config = SimpleNamespace(max_model_len=2048)
        self.started: list[str] = []
        self.closed: list[str] = []
        self.on_accepted: dict[AcceptanceKey, Any] = {}

    async def engine_generate(
        self, prompt: Any, params: SamplingParams, request_id: str, **kwargs: Any
    ) -> AsyncIterator[Any]:
        self.started.append(request_id)
        accepted = self.on_accepted.pop(acceptance_key(request_id, prompt), None)
        if accepted is not None:
            accepted()
        try:
            for step in range(self.steps):
                await asyncio.sleep(self.delay)
                output = SimpleNamespace(token_ids=[step], text="x")
                yield SimpleNamespace(
                    prompt_token_ids=[1, 2] if step == 0 else None, outputs=[output]
                )
        finally:
            self.closed.append(request_id)


class Counts:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def record_chunk(self, num_prompt_tokens: int, num_new_tokens: int) -> None:
        self.calls.append((num_prompt_tokens, num_new_tokens))


async def test_engine_requests_run_through_the_guard_and_are_known_by_the_admitted_id() -> None:
    llm, counts = FakeLLM(), Counts()
    requests = EngineRequests()
    client = GuardedRequest(llm, RequestGuard("admitted", RequestLimits(), counts), requests)
    outputs = client.generate({"prompt": "x"}, SamplingParams(max_tokens=3), "cmpl-1-0")
    assert requests == {}  # known once it runs
    assert await anext(outputs) and requests == {"admitted": {"cmpl-1-0"}}
    assert [o async for o in outputs] and requests == {}
    assert counts.calls == [(2, 1), (0, 1), (0, 1)]


@pytest.mark.parametrize("kind", [RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY])
async def test_a_stream_past_the_deadline_is_aborted_and_reported(kind: RequestOutputKind) -> None:
    llm = FakeLLM(steps=100, delay=0.02)
    guard = RequestGuard("admitted", RequestLimits(), timeout_seconds=0.1)
    outputs = GuardedRequest(llm, guard, EngineRequests()).generate(
        "x", SamplingParams(output_kind=kind), "r"
    )
    if kind is RequestOutputKind.DELTA:  # streaming: ends quietly, the frontend reports it
        assert 1 <= len([o async for o in outputs]) < 100
    else:
        with pytest.raises(RequestTimeoutError):
            [o async for o in outputs]
    assert isinstance(guard.failure, RequestTimeoutError) and llm.closed == ["r"]


async def test_integers_the_engine_cannot_carry_are_refused_before_it_sees_them() -> None:
    llm = FakeLLM()
    client = GuardedRequest(llm, RequestGuard("admitted", RequestLimits()), EngineRequests())
    with pytest.raises(InvalidRequestError) as raised:
        client.generate("x", SamplingParams(top_k=10**30), "r")
    assert raised.value.param == "top_k" and llm.started == []
    with pytest.raises(InvalidRequestError, match="logit_bias"):
        client.generate("x", SamplingParams(logit_bias={2**70: 1.0}), "r")


async def test_abort_reaches_the_engine_requests_of_an_admitted_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = VllmEngine(spec_with(tmp_path, {}))
    aborted: list[Any] = []

    async def abort(ids: Any) -> None:
        aborted.append(ids)

    monkeypatch.setattr(engine, "_llm", SimpleNamespace(abort=abort))
    engine._engine_requests["admitted"] = {"cmpl-x-0"}
    await engine.abort("admitted")
    await engine.abort("triton-id")
    assert aborted == [["admitted", "cmpl-x-0"], ["triton-id"]]


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(-2, 2)
    | st.sampled_from(["", "a", "auto"])
)
KEYS = st.sampled_from(["type", "name", "json", "a"])
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=6,
)


def bodies(request_class: Any, required: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The required fields, then any of the model's fields with any JSON value."""
    fields = st.dictionaries(st.sampled_from(sorted(request_class.model_fields)), JSON, max_size=4)
    return fields.map(lambda extra: {**required, **extra})


@pytest.mark.parametrize(
    ("request_class", "required"),
    [(CompletionRequest, {"prompt": "x"}), (ChatCompletionRequest, CHAT)],
)
def test_any_json_in_any_field_is_read_or_refused_with_a_400(
    request_class: Any, required: dict[str, Any]
) -> None:
    @given(body=bodies(request_class, required))
    @settings(max_examples=400, deadline=None, derandomize=True, database=None)
    def check(body: dict[str, Any]) -> None:
        with contextlib.suppress(InvalidRequestError):
            parse(request_class, body)

    check()


class FailingLLM(FakeLLM):
    """The engine ends every request at once with vLLM's finish reason "error"."""

    async def engine_generate(
        self, prompt: Any, params: SamplingParams, request_id: str, **kwargs: Any
    ) -> AsyncIterator[Any]:
        self.started.append(request_id)
        yield SimpleNamespace(
            prompt_token_ids=[1],
            finished=True,
            outputs=[SimpleNamespace(token_ids=[], finish_reason="error")],
        )


class RefusingCheck:
    """A grammar check that refuses every grammar (as the compiler refuses a broken one)."""

    async def check(self, params: Any, field: str) -> None:
        raise InvalidRequestError(
            "structured_outputs: the engine cannot use this grammar: broken",
            param="structured_outputs",
        )


class PassingCheck:
    async def check(self, params: Any, field: str) -> None:
        return None


JSON_GRAMMAR = StructuredOutputsParams(json={"type": "object"})


@pytest.mark.parametrize("kind", [RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY])
async def test_a_refused_grammar_never_reaches_the_engine(
    monkeypatch: pytest.MonkeyPatch, kind: RequestOutputKind
) -> None:
    monkeypatch.setattr(
        "app.engine.vllm_openai.guarded_request.grammar_check", lambda llm: RefusingCheck()
    )
    llm, guard = FakeLLM(), RequestGuard("admitted", RequestLimits())
    client = GuardedRequest(llm, guard, EngineRequests())
    outputs = client.generate(
        "x", SamplingParams(structured_outputs=JSON_GRAMMAR, output_kind=kind), "r"
    )
    with pytest.raises(InvalidRequestError, match="broken"):  # a stream starts only after it
        await client.grammars_checked()
    if kind is RequestOutputKind.DELTA:  # streaming: ends quietly, the frontend reports it
        assert [o async for o in outputs] == []
    else:
        with pytest.raises(InvalidRequestError, match="broken"):
            [o async for o in outputs]
    assert isinstance(guard.failure, InvalidRequestError) and llm.started == []


async def test_an_engine_error_on_a_grammar_is_the_clients_and_without_one_the_servers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "app.engine.vllm_openai.guarded_request.grammar_check", lambda llm: PassingCheck()
    )
    client = GuardedRequest(
        FailingLLM(), RequestGuard("admitted", RequestLimits()), EngineRequests()
    )
    outputs = client.generate("x", SamplingParams(structured_outputs=JSON_GRAMMAR), "r")
    with pytest.raises(InvalidRequestError) as raised:
        [o async for o in outputs]
    assert raised.value.param == "structured_outputs"
    assert raised.value.message.startswith(
        "structured_outputs: the engine could not use this grammar"
    )
    unstructured = [o async for o in client.generate("x", SamplingParams(), "s")]
    assert unstructured[0].outputs[0].finish_reason == "error"  # vLLM's serving code answers 500
