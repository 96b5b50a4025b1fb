"""The server's limits on OpenAI bodies, checked on the body as sent (before vLLM's request
models read it) and as vLLM read it: O(1) per field, so that a request far above a limit is
refused before vLLM's code does any work it sizes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from app.core.guard import RequestGuard
from app.core.limits import STOP_FIELDS, TOKEN_ID_FIELDS, check_count, integer
from app.engine.vllm_openai.bodies import parse, set_by_client
from app.errors import InvalidRequestError

LIMITED_FIELDS = ("n", *STOP_FIELDS, *TOKEN_ID_FIELDS)
"""Fields of vLLM's request models that `check_sampling` bounds by their value or length
(besides max_tokens), read from the limit table's own lists."""


RequestModel = TypeVar("RequestModel", bound=BaseModel)


def read_within_limits(
    request_class: type[RequestModel],
    body: dict[str, Any],
    guard: RequestGuard,
    max_logprobs: int,
    max_tokens_field: str = "max_tokens",
) -> RequestModel:
    """`body` read by vLLM's `request_class` within the server's limits and the model's
    `max_logprobs`: checked as sent (before vLLM's model does work the body sizes) and as
    read (vLLM reads `n: "9"` as 9); a 400 naming the field otherwise."""
    check_limits(guard, body, max_tokens_field)
    check_logprobs(body, max_logprobs)
    request: RequestModel = parse(request_class, body)
    check_limits(guard, values_of(request, max_tokens_field), max_tokens_field)
    return request


def check_limits(
    guard: RequestGuard, values: Mapping[str, Any], max_tokens_field: str = "max_tokens"
) -> None:
    """The server's limits on a body (as sent, then as vLLM read it): O(1) per field, so that
    a request far above a limit is refused before vLLM's code does any work it sizes."""
    check_best_of(values.get("best_of"))
    guard.check_sampling(dict(values), max_tokens_field)
    check_count("prompt", prompt_count(values.get("prompt")), guard.limits.max_prompts)


def check_best_of(value: Any) -> None:
    """vLLM's engine samples exactly `n` choices and its request models drop `best_of`
    unread: one asking for more than one choice is refused, naming it."""
    if value is not None and integer(value) != 1:
        raise InvalidRequestError(
            "best_of: not supported (the engine returns every choice it samples): use n",
            param="best_of",
        )


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


def values_of(request: BaseModel, max_tokens_field: str = "max_tokens") -> dict[str, Any]:
    """The limited fields of vLLM's request model; `max_tokens` only where the client set it."""
    values = {name: getattr(request, name, None) for name in LIMITED_FIELDS}
    values[max_tokens_field] = set_by_client(request, max_tokens_field)
    values["prompt"] = getattr(request, "prompt", None)
    return values


def prompt_count(prompt: Any) -> int:
    """How many prompts (engine requests) a completions `prompt` holds: a list of texts or of
    token lists is several; a text or one token list is one."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        return len(prompt)
    return 0 if prompt is None else 1
