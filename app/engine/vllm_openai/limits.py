"""The limits on an OpenAI body that only the engine adapter can check: the model's bound on
log probabilities, and the server's limits on the values as vLLM's request models read them
(`n: "9"` is 9 to them). The body as sent was checked by the frontend before admission
(app/openai/limits.py): O(1) per field, before vLLM's code does any work it sizes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from app.core.guard import RequestGuard
from app.core.limits import STOP_FIELDS, TOKEN_ID_FIELDS, check_count, count_prompts, integer
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
    """`body` (within the server's limits as sent) read by vLLM's `request_class`, within the
    model's `max_logprobs` and the server's limits as read; a 400 naming the field
    otherwise."""
    check_logprobs(body, max_logprobs)
    request: RequestModel = parse(request_class, body)
    check_limits(guard, values_of(request, max_tokens_field), max_tokens_field)
    return request


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


def values_of(request: BaseModel, max_tokens_field: str = "max_tokens") -> dict[str, Any]:
    """The limited fields of vLLM's request model; `max_tokens` only where the client set it."""
    values = {name: getattr(request, name, None) for name in LIMITED_FIELDS}
    values[max_tokens_field] = set_by_client(request, max_tokens_field)
    values["prompt"] = getattr(request, "prompt", None)
    return values
