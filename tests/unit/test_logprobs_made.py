"""The server's bound on the log-probabilities one OpenAI request may make (MAX_LOGPROB_ENTRIES),
checked on the body as vLLM's request models read it, before vLLM's serving code runs: each
choice's new tokens and, with `prompt_logprobs` or `echo`, its prompt, times the
alternatives asked for plus the token's own. The engine's outputs hold them all until the
response is written: without the bound, 64 echoed prompts x 16 choices x 20 alternatives on
a 32k-token model would hold some 700 million (about 150 GB). Triton's routes:
test_request_limits.py."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.guard import RequestGuard
from app.core.limits import RequestLimits
from app.engine.vllm_openai.compat import (
    ChatCompletionRequest,
    CompletionRequest,
    ResponsesRequest,
)
from app.engine.vllm_openai.limits import ModelBounds, read_within_limits
from app.errors import InvalidRequestError

CONTEXT = 32_768
VOCAB = 49_152
"""The default model's vocabulary."""
MODEL = ModelBounds(max_logprobs=20, context_length=CONTEXT, vocab_size=VOCAB)
LONG = "word " * 10_000
"""A prompt of 50,000 UTF-8 bytes: up to the whole context."""
INCLUDED = {"include": ["message.output_text.logprobs"]}


def read(request_class: type[Any], body: dict[str, Any], field: str = "max_tokens") -> Any:
    guard = RequestGuard("r", RequestLimits())
    body = {"model": "m", **body}
    return read_within_limits(request_class, body, guard, MODEL, field)


def refusal(request_class: type[Any], body: dict[str, Any], field: str = "max_tokens") -> Any:
    with pytest.raises(InvalidRequestError) as raised:
        read(request_class, body, field)
    return raised.value


@pytest.mark.parametrize(
    ("request_class", "body", "field", "param", "made"),
    [
        (
            CompletionRequest,
            {"prompt": [LONG] * 64, "n": 16, "echo": True, "logprobs": 20, "max_tokens": 1},
            "max_tokens",
            "echo",
            64 * 16 * (CONTEXT + 1) * 21,
        ),
        (
            CompletionRequest,
            {"prompt": "Hi", "n": 16, "logprobs": 20, "max_tokens": 16_000},
            "max_tokens",
            "logprobs",
            16 * 16_000 * 21,
        ),
        (
            CompletionRequest,
            {"prompt": [[7] * 20_000] * 2, "prompt_logprobs": 20, "n": 8},
            "max_tokens",
            "prompt_logprobs",
            2 * 8 * 20_000 * 21,
        ),
        (
            ChatCompletionRequest,
            {
                "messages": [{"role": "user", "content": "Hi"}],
                "n": 16,
                "logprobs": True,
                "top_logprobs": 20,
            },
            "max_completion_tokens",
            "top_logprobs",
            16 * CONTEXT * 21,
        ),
    ],
    ids=["echoed-batch", "many-new-tokens", "prompt-logprobs", "chat-rest-of-context"],
)
def test_a_request_that_may_make_too_many_log_probabilities_is_refused_naming_the_field(
    request_class: type[Any], body: dict[str, Any], field: str, param: str, made: int
) -> None:
    error = refusal(request_class, body, field)
    assert error.param == param
    assert error.message.startswith(f"{param}: the request may make {made:,} log-probabilities")
    assert "above this server's limit of 4,194,304" in error.message


@pytest.mark.parametrize(
    ("request_class", "body", "field"),
    [
        (
            CompletionRequest,
            {"prompt": ["Hi"] * 64, "n": 16, "echo": True, "logprobs": 20},
            "max_tokens",
        ),
        (
            CompletionRequest,
            {"prompt": [LONG] * 64, "logprobs": 1, "max_tokens": 0, "echo": True},
            "max_tokens",
        ),
        (CompletionRequest, {"prompt": [LONG] * 64, "n": 16, "echo": True}, "max_tokens"),
        (
            ChatCompletionRequest,
            {"messages": [{"role": "user", "content": "Hi"}], "logprobs": True, "top_logprobs": 20},
            "max_completion_tokens",
        ),
        (ResponsesRequest, {"input": "Hi", "top_logprobs": 20}, "max_output_tokens"),
        (
            ChatCompletionRequest,
            {
                "messages": [{"role": "user", "content": "Hi"}],
                "n": 4,
                "echo": True,
                "logprobs": True,
                "top_logprobs": 20,
            },
            "max_completion_tokens",
        ),
    ],
    ids=[
        "short-echoed-batch",
        "loglikelihood-batch",
        "no-logprobs",
        "chat-one-choice",
        "responses-not-included",
        "chat-echo-scores-no-prompt",
    ],
)
def test_requests_within_the_bound_are_read(
    request_class: type[Any], body: dict[str, Any], field: str
) -> None:
    """Short prompts count by their bytes, not the context; a loglikelihood batch (echo, one
    alternative, no new tokens: lm-eval's) of long prompts fits; and a request that asks for
    no log-probabilities is not counted."""
    read(request_class, body, field)


def test_the_bound_is_the_servers_setting() -> None:
    guard = RequestGuard("r", RequestLimits(max_logprob_entries=None))
    body = {"model": "m", "prompt": [LONG] * 64, "n": 16, "echo": True, "logprobs": 20}
    read_within_limits(CompletionRequest, body, guard, MODEL)


def test_a_responses_answer_counts_its_log_probabilities_where_include_asks_for_them() -> None:
    """The Responses API has one choice: only a long context goes over (256k tokens x 21)."""
    guard = RequestGuard("r", RequestLimits())
    body = {"model": "m", "input": "Hi", "top_logprobs": 20}
    field, model = "max_output_tokens", ModelBounds(20, 262_144, VOCAB)
    read_within_limits(ResponsesRequest, body, guard, model, field)
    with pytest.raises(InvalidRequestError) as raised:
        read_within_limits(ResponsesRequest, {**body, **INCLUDED}, guard, model, field)
    assert raised.value.message.startswith("top_logprobs: the request may make 5,505,024 ")


def test_all_of_the_vocabulary_counts_as_its_size_where_the_model_allows_it() -> None:
    """`-1` asks for every token's log-probability, which vLLM allows where the model's
    `max_logprobs` is -1: 100 new tokens x (49,152 + 1) go over; 50 do not."""
    guard = RequestGuard("r", RequestLimits())
    unbounded = ModelBounds(max_logprobs=-1, context_length=2_048, vocab_size=VOCAB)
    body = {"model": "m", "prompt": "Hi", "logprobs": -1}
    read_within_limits(CompletionRequest, {**body, "max_tokens": 50}, guard, unbounded)
    with pytest.raises(InvalidRequestError) as raised:
        read_within_limits(CompletionRequest, {**body, "max_tokens": 100}, guard, unbounded)
    assert raised.value.message.startswith("logprobs: the request may make 4,915,300 ")
    scored = {"model": "m", "prompt": LONG, "max_tokens": 1, "prompt_logprobs": -1}
    with pytest.raises(InvalidRequestError) as raised:
        read_within_limits(CompletionRequest, scored, guard, unbounded)
    assert raised.value.param == "prompt_logprobs"


def test_logprob_token_ids_count_as_the_alternatives_they_name() -> None:
    """vLLM computes one log-probability for each token `logprob_token_ids` names (up to
    128), whatever `logprobs` says: 16 choices x 2,048 tokens x (128 + 1) go over."""
    body = {"prompt": "Hi", "n": 16, "max_tokens": 2048, "logprobs": 1}
    read(CompletionRequest, {**body, "logprob_token_ids": list(range(64))})
    refused = refusal(CompletionRequest, {**body, "logprob_token_ids": list(range(128))})
    assert refused.param == "logprob_token_ids"
    assert refused.message.startswith("logprob_token_ids: the request may make 4,227,072 ")
