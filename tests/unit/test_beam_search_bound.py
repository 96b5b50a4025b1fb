"""The server's bound on what one OpenAI beam search may keep (MAX_BEAM_SEARCH_POSITIONS),
checked on the body as vLLM's request models read it, before vLLM's serving code runs.

vLLM's beam search (`use_beam_search`, `n` beams) keeps every beam that ended, each with its
tokens (the prompt's too) and its new tokens' log-probabilities: `n` x new tokens x
(prompt + new tokens) positions, which grows with the square of the new tokens. Measured with
vLLM's own beam search on an engine that answers at once, some 13 bytes a position: 10 beams
of 2,048 tokens kept 542 MiB, of 4,096 tokens 2 GiB; on a 32k-token model, one request
could have kept some 130 GB."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.guard import RequestGuard
from app.core.limits import RequestLimits
from app.engine.vllm_openai.compat import ChatCompletionRequest, CompletionRequest
from app.engine.vllm_openai.limits import ModelBounds, read_within_limits
from app.errors import InvalidRequestError

LONG_CONTEXT = ModelBounds(max_logprobs=20, context_length=32_768, vocab_size=49_152)
DEFAULT_MODEL = ModelBounds(max_logprobs=20, context_length=2_048, vocab_size=49_152)
"""The default model's bounds: every beam search it can run is within the default limit."""
MESSAGES = {"messages": [{"role": "user", "content": "Hi"}]}
BEAMS = {"use_beam_search": True}


def read(
    request_class: type[Any],
    body: dict[str, Any],
    model: ModelBounds = LONG_CONTEXT,
    limits: RequestLimits | None = None,
) -> Any:
    guard = RequestGuard("r", limits or RequestLimits())
    return read_within_limits(request_class, {"model": "m", **body}, guard, model)


def refusal(request_class: type[Any], body: dict[str, Any]) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as raised:
        read(request_class, body)
    assert raised.value.param == "use_beam_search"
    return raised.value


def test_many_new_tokens_over_many_beams_are_refused_naming_the_field() -> None:
    """ "Hi" is 4 tokens at most: 10 x 4,096 x (4 + 4,096)."""
    body = {"prompt": "Hi", "n": 10, "max_tokens": 4096, **BEAMS}
    assert refusal(CompletionRequest, body).message == (
        "use_beam_search: 10 beams of up to 4,096 new tokens may keep 167,936,000 token "
        "positions (beams x new tokens x (prompt + new tokens)), above this server's limit "
        "of 67,108,864: ask for fewer beams (n) or new tokens"
    )


def test_a_chat_beam_search_counts_the_context_as_its_prompt() -> None:
    """Its prompt is the rendered conversation; unbounded, its new tokens are the context's."""
    refused = refusal(ChatCompletionRequest, {**MESSAGES, "n": 4, **BEAMS})
    assert "4 beams of up to 32,768 new tokens" in refused.message
    refusal(ChatCompletionRequest, {**MESSAGES, "n": 10, "max_tokens": 256, **BEAMS})
    read(ChatCompletionRequest, {**MESSAGES, "n": 4, "max_tokens": 256, **BEAMS})


def test_each_prompt_of_a_batch_counts() -> None:
    """4 beams x 512 x (4 + 512) a prompt: 63 prompts are within the limit, 64 are not."""
    body = {"n": 4, "max_tokens": 512, **BEAMS}
    read(CompletionRequest, {**body, "prompt": ["Hi"] * 63})
    refusal(CompletionRequest, {**body, "prompt": ["Hi"] * 64})


def test_every_beam_search_of_the_default_model_is_within_the_default_limit() -> None:
    """2,048 tokens of context, 10 beams at most (2 x 10 log-probabilities of its 20)."""
    read(CompletionRequest, {"prompt": "Hi", "n": 10, "max_tokens": 2044, **BEAMS}, DEFAULT_MODEL)
    read(ChatCompletionRequest, {**MESSAGES, "n": 10, **BEAMS}, DEFAULT_MODEL)


def test_sampling_is_not_bounded_by_it_and_the_setting_lifts_it() -> None:
    body = {"prompt": "Hi", "n": 10, "max_tokens": 4096}
    assert read(CompletionRequest, body).n == 10
    unbounded = RequestLimits(max_beam_search_positions=None)
    assert read(CompletionRequest, {**body, **BEAMS}, limits=unbounded).use_beam_search
