"""Grammars the engine cannot use are refused with the compiler's reason before the engine
sees them (compiled in a grammar worker with vLLM's own backends and the default model's
tokenizer), and a request the engine ends with an error is classified as the client's or the
server's."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_asyncio
from vllm import SamplingParams
from vllm.config import ModelConfig, StructuredOutputsConfig
from vllm.sampling_params import StructuredOutputsParams
from vllm.tokenizers import get_tokenizer

from app.engine.grammars import GrammarCheck, failure_of
from app.errors import InvalidRequestError, ServerError
from app.paths import PROJECT_ROOT

MODEL = PROJECT_ROOT / ".cache" / "models" / "smollm2"
OBJECT = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SELF_REFERENCE = {"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/a"}}}

CASES = [
    (
        "min_items",
        {"json": {"type": "array", "minItems": 100000}},
        "parameters.structured_outputs: the engine cannot use this grammar: minItems is greater "
        "than the number of prefixItems, but additional items are not allowed: 100000 > 0",
    ),
    (
        "min_properties",
        {"json": {"type": "object", "minProperties": 3}},
        "parameters.structured_outputs: the engine cannot use this grammar: minProperties is "
        "greater than the number of properties, but additional properties aren't allowed: 3 > 0",
    ),
    (
        "pattern_properties",
        {"json": {"type": "object", "patternProperties": {"(": {"type": "string"}}}},
        "parameters.structured_outputs: the engine cannot use this grammar: Regex parsing error "
        "at position 2: The parenthesis is not closed.",
    ),
    (
        "self_reference",
        {"json": SELF_REFERENCE},
        "parameters.structured_outputs: the grammar matches no text: no token can start it",
    ),
    (
        "left_recursion",
        {"grammar": "root ::= root"},
        "parameters.structured_outputs: the grammar matches no text: no token can start it",
    ),
]


@pytest.fixture(scope="module")
def llm() -> Any:
    """What the check reads of an `AsyncLLM`: its configs and tokenizer (the default model)."""
    if not (MODEL / "config.json").exists():
        pytest.skip("the default model is not prepared (make setup)")
    model_config = ModelConfig(model=str(MODEL), max_model_len=2048)
    vllm_config = SimpleNamespace(
        model_config=model_config,
        speculative_config=None,
        structured_outputs_config=StructuredOutputsConfig(backend="auto"),
    )
    return SimpleNamespace(
        vllm_config=vllm_config, model_config=model_config, tokenizer=get_tokenizer(str(MODEL))
    )


def params(structured: dict[str, Any], **values: Any) -> SamplingParams:
    return SamplingParams(structured_outputs=StructuredOutputsParams(**structured), **values)


async def refusal(check: GrammarCheck, sampling: SamplingParams) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as raised:
        await check.check(sampling, "parameters")
    return raised.value


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def xgrammar_check(llm: Any) -> AsyncIterator[GrammarCheck]:
    """A check whose engine took a plain schema first: its core compiles with xgrammar (one
    worker for the module's tests: each takes seconds to start)."""
    check = GrammarCheck(llm)
    await check.check(params({"json": OBJECT}), "parameters")
    yield check
    check.close()


@pytest.mark.parametrize(("name", "structured", "message"), CASES, ids=[case[0] for case in CASES])
async def test_grammars_the_engine_cannot_use_are_refused_with_the_reason(
    xgrammar_check: GrammarCheck, name: str, structured: dict[str, Any], message: str
) -> None:
    started = time.perf_counter()
    error = await refusal(xgrammar_check, params(structured))
    assert error.message == message
    assert error.param == "parameters.structured_outputs"
    assert time.perf_counter() - started < 5


async def test_allowed_token_ids_that_exclude_the_grammar_are_refused(
    xgrammar_check: GrammarCheck,
) -> None:
    """`{"type": "integer"}` starts with a digit or '-': token 1 is neither."""
    error = await refusal(
        xgrammar_check, params({"json": {"type": "integer"}}, allowed_token_ids=[1])
    )
    assert error.message == (
        "parameters.allowed_token_ids: none of these tokens can start the text the grammar allows"
    )
    assert error.param == "parameters.allowed_token_ids"


async def test_usable_grammars_pass(xgrammar_check: GrammarCheck, llm: Any) -> None:
    digits = [llm.tokenizer.convert_tokens_to_ids(str(digit)) for digit in range(10)]
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"json": OBJECT}, {}),
        ({"regex": "[a-z]{3}"}, {}),
        ({"choice": ["yes", "no"]}, {}),
        ({"grammar": 'root ::= "a" | "b"'}, {}),
        ({"json": {"type": "integer"}}, {"allowed_token_ids": digits}),
    ]
    for structured, values in cases:
        await xgrammar_check.check(params(structured, **values), "parameters")


async def test_the_engines_first_backend_is_the_one_checked_with(llm: Any) -> None:
    """vLLM's engine core compiles every grammar with the backend of the first one it took:
    after a schema only llguidance serves, llguidance's verdict is the one that counts."""
    check = GrammarCheck(llm)
    try:
        await check.check(params({"json": {"type": "array", "minItems": 3}}), "parameters")
        await check.check(params({"json": {"type": "object", "minProperties": 3}}), "parameters")
        error = await refusal(check, params({"grammar": "root ::= root"}))
    finally:
        check.close()
    assert error.message.startswith(
        "parameters.structured_outputs: the engine cannot use this grammar: "
    )


async def test_requests_without_a_grammar_are_not_checked(llm: Any) -> None:
    check = GrammarCheck(llm)
    await check.check(SamplingParams(allowed_token_ids=[1]), "parameters")
    assert check.pool is None


def test_an_engine_failure_is_the_clients_only_when_its_grammar_was_in_play() -> None:
    error = failure_of(params({"json": OBJECT}), "parameters")
    assert isinstance(error, InvalidRequestError) and error.param == "parameters.structured_outputs"
    assert error.message.startswith(
        "parameters.structured_outputs: the engine could not use this grammar"
    )
    error = failure_of(params({"json": OBJECT}), "")
    assert error.param == "structured_outputs"
    error = failure_of(SamplingParams(), "parameters")
    assert type(error) is ServerError


@pytest.mark.parametrize(
    ("structured", "reason"),
    [
        ({"choice": []}, "Choice '[]' cannot be an empty list"),
        ({"json": "{not json"}, "Invalid JSON grammar specification."),
    ],
)
async def test_a_grammar_vllms_own_check_refuses_is_refused_before_the_engine_takes_it(
    xgrammar_only_check: GrammarCheck, structured: dict[str, Any], reason: str
) -> None:
    """vLLM refuses these when the engine takes the request: an OpenAI stream would have
    started (200) by then, so the check refuses them first, with vLLM's reason."""
    error = await refusal(xgrammar_only_check, params(structured))
    assert error.param == "parameters.structured_outputs"
    assert error.message == (
        f"parameters.structured_outputs: the engine cannot use this grammar: {reason}"
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def xgrammar_only_check(llm: Any) -> AsyncIterator[GrammarCheck]:
    """The check of the default model with xgrammar as its structured-output backend."""
    config = SimpleNamespace(
        **{
            **vars(llm.vllm_config),
            "structured_outputs_config": StructuredOutputsConfig(backend="xgrammar"),
        }
    )
    check = GrammarCheck(SimpleNamespace(**{**vars(llm), "vllm_config": config}))
    yield check
    check.close()
