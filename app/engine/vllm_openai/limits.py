"""The limits on an OpenAI body that only the engine adapter can check: the model's bound on
log probabilities, and the server's limits on the values as vLLM's request models read them
(`n: "9"` is 9 to them). The body as sent was checked by the frontend before admission
(app/openai/limits.py): O(1) per field, before vLLM's code does any work it sizes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from app.core.guard import RequestGuard
from app.core.limits import (
    REPETITION_FIELD,
    STOP_FIELDS,
    TOKEN_ID_FIELDS,
    RequestLimits,
    alternatives_computed,
    check_count,
    check_logprob_entries,
    count_prompts,
    integer,
    logprob_entries,
    unset_max_tokens,
)
from app.engine.vllm_openai.bodies import parse
from app.errors import InvalidRequestError

MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
LIMITED_FIELDS = ("n", REPETITION_FIELD, *STOP_FIELDS, *TOKEN_ID_FIELDS)
"""Fields of vLLM's request models that `check_sampling` bounds by their value or length
(besides max_tokens), read from the limit table's own lists."""

RequestModel = TypeVar("RequestModel", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ModelBounds:
    """What the served model bounds a request by."""

    max_logprobs: int
    """Log probabilities per position (vLLM's `max_logprobs`; -1: no bound)."""
    context_length: int
    """Tokens of prompt and output (vLLM's `max_model_len`)."""
    vocab_size: int
    """Tokens of its vocabulary: the alternatives a position has when a request asks for
    all of them (`-1`, where `max_logprobs` is -1)."""


def read_within_limits(
    request_class: type[RequestModel],
    body: dict[str, Any],
    guard: RequestGuard,
    model: ModelBounds,
    max_tokens_field: str = "max_tokens",
) -> RequestModel:
    """`body` (within the server's limits as sent) read by vLLM's `request_class`, within the
    `model`'s bounds and the server's limits as read, the log-probabilities it may make and
    what its beam search may keep included; a 400 naming the field otherwise. A body that sets no
    bound on new tokens asks vLLM's default for it within the server's limit."""
    check_logprobs(body, model.max_logprobs)
    bounded = sets_a_bound(body, request_class)  # before vLLM's validators fill in defaults
    request: RequestModel = parse(request_class, body)
    check_limits(guard, values_of(request, max_tokens_field, bounded), max_tokens_field)
    if not bounded and guard.limits.max_tokens is not None:
        default = request_class.model_fields[max_tokens_field].default
        setattr(request, max_tokens_field, unset_max_tokens(default, guard.limits.max_tokens))
    check_logprobs_made(request, max_tokens_field, model, guard.limits)
    check_beam_search(request, max_tokens_field, model.context_length, guard.limits)
    return request


def sets_a_bound(body: Mapping[str, Any], request_class: type[BaseModel]) -> bool:
    """Whether the body bounds its new tokens by a field its route reads (another route's
    field is not read, and bounds nothing)."""
    fields = request_class.model_fields
    return any(body.get(name) is not None for name in MAX_TOKENS_FIELDS if name in fields)


def check_limits(
    guard: RequestGuard, values: Mapping[str, Any], max_tokens_field: str = "max_tokens"
) -> None:
    """The server's limits on the limited values of a body as vLLM read them: O(1) per field."""
    guard.check_sampling(dict(values), max_tokens_field)
    check_count("prompt", count_prompts(values.get("prompt")), guard.limits.max_prompts)


LOGPROB_FIELDS = ("logprobs", "top_logprobs", "prompt_logprobs")


def check_logprobs(body: Mapping[str, Any], max_logprobs: int) -> None:
    """The model's bound on log probabilities per position (vLLM's `max_logprobs`), checked
    on the body as sent, before vLLM's serving code reads it."""
    if max_logprobs < 0:
        return
    for name in LOGPROB_FIELDS:
        value = integer(body.get(name))
        if value is not None and value > max_logprobs:
            raise InvalidRequestError(
                f"{name}: {value} is above the model's limit of {max_logprobs} log probabilities",
                param=name,
            )


def values_of(request: BaseModel, max_tokens_field: str, bounded: bool) -> dict[str, Any]:
    """The limited fields of vLLM's request model; `max_tokens_field` only where the client
    `bounded` the new tokens (else it is vLLM's default)."""
    wanted = {*LIMITED_FIELDS, "prompt", *([max_tokens_field] if bounded else [])}
    fields = type(request).model_fields
    # the instance's field values, not its attributes (reading chat's max_tokens attribute
    # warns that it is deprecated), and not a dump (which would copy the prompt)
    stored = vars(request)
    values = {name: stored.get(name) for name in wanted if name in fields}
    values.setdefault(max_tokens_field, None)
    return values


LOGPROBS_INCLUDED = "message.output_text.logprobs"
"""The Responses API's `include` entry that asks for the output's log-probabilities."""


def check_logprobs_made(
    request: BaseModel, max_tokens_field: str, model: ModelBounds, limits: RequestLimits
) -> None:
    """The server's bound on the log-probabilities vLLM's `request` may make: each choice's
    new tokens (up to its `max_tokens_field`, else the context) and, with `prompt_logprobs`
    or completions' `echo`, its prompt's (up to its UTF-8 bytes or token ids, and the
    context), times the alternatives asked for at each position (`-1`: the vocabulary),
    plus its own token."""
    stored = vars(request)
    context_length = model.context_length
    prompts = prompt_bounds(stored.get("prompt"), context_length)
    n = integer(stored.get("n")) or 1
    counted = isinstance(stored.get("logprobs"), int) and not isinstance(stored["logprobs"], bool)
    asked, field = alternatives_computed(
        alternatives_asked(stored), stored, "logprobs" if counted else "top_logprobs"
    )
    alternatives = counted_alternatives(asked, model.vocab_size)
    new_tokens = new_tokens_at_most(stored, max_tokens_field, context_length)
    made = logprob_entries(n * len(prompts), new_tokens, alternatives)
    asked_of_prompt = integer(stored.get("prompt_logprobs"))
    prompt_alternatives = counted_alternatives(asked_of_prompt, model.vocab_size)
    if prompt_alternatives is None and stored.get("echo") is True and "prompt" in stored:
        prompt_alternatives = alternatives  # completions score an echoed prompt as output
    scored = sum(logprob_entries(n, positions, prompt_alternatives) for positions in prompts)
    if scored > made:
        field = "prompt_logprobs" if stored.get("prompt_logprobs") is not None else "echo"
    check_logprob_entries(field, made + scored, limits.max_logprob_entries)


def counted_alternatives(alternatives: int | None, vocab_size: int) -> int | None:
    """Alternatives asked for at a position, `-1` (every token of the vocabulary) counted."""
    return vocab_size if alternatives == -1 else alternatives


def check_beam_search(
    request: BaseModel, max_tokens_field: str, context_length: int, limits: RequestLimits
) -> None:
    """The server's bound on what vLLM's beam search (`use_beam_search`) keeps of `request`:
    every beam that ended, each with its tokens (the prompt's too) and its new tokens'
    log-probabilities, so `n` beams x new tokens x (prompt + new tokens) positions per prompt
    (chat: the context), which grows with the square of the new tokens."""
    stored = vars(request)
    limit = limits.max_beam_search_positions
    if stored.get("use_beam_search") is not True or limit is None:
        return
    beams = integer(stored.get("n")) or 1
    new_tokens = new_tokens_at_most(stored, max_tokens_field, context_length)
    prompts = prompt_bounds(stored.get("prompt"), context_length)
    kept = sum(beams * new_tokens * min(p + new_tokens, context_length) for p in prompts)
    if kept > limit:
        raise InvalidRequestError(
            f"use_beam_search: {beams} beams of up to {new_tokens:,} new tokens may keep "
            f"{kept:,} token positions (beams x new tokens x (prompt + new tokens)), above "
            f"this server's limit of {limit:,}: ask for fewer beams (n) or new tokens",
            param="use_beam_search",
        )


def new_tokens_at_most(
    stored: Mapping[str, Any], max_tokens_field: str, context_length: int
) -> int:
    """A choice's new tokens at most: its `max_tokens_field`, else the context."""
    asked = integer(stored.get(max_tokens_field))
    return min(context_length if asked is None else asked, context_length)


def alternatives_asked(stored: Mapping[str, Any]) -> int | None:
    """Alternatives per new token: completions' `logprobs`; chat's `top_logprobs` where
    `logprobs` is true; the Responses API's `top_logprobs` where `include` asks for them."""
    logprobs = stored.get("logprobs")
    if isinstance(logprobs, bool):
        return (integer(stored.get("top_logprobs")) or 0) if logprobs else None
    if logprobs is not None:
        return integer(logprobs)
    include = stored.get("include") or ()
    if LOGPROBS_INCLUDED in [getattr(entry, "value", entry) for entry in include]:
        return integer(stored.get("top_logprobs")) or 0
    return None


def prompt_bounds(prompt: Any, context_length: int) -> list[int]:
    """Each prompt's tokens at most: a text's UTF-8 bytes (a token is at least one) and two
    special tokens, a token-id list's length, and the context; one prompt where the request
    has none of its own (chat, the Responses API)."""
    if prompt is None:
        return [context_length]
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompt = [prompt]
    bounds = [min(context_length, prompt_tokens(entry, context_length)) for entry in prompt]
    return bounds or [context_length]


def prompt_tokens(prompt: Any, context_length: int) -> int:
    """A prompt's tokens at most (a text as long as the context is encoded no further)."""
    if isinstance(prompt, str):
        if len(prompt) >= context_length:
            return context_length
        return len(prompt.encode("utf-8", "surrogatepass")) + 2
    return len(prompt) if isinstance(prompt, list) else 0
