"""Bounds on what one request may ask for: the server's limits and the model's context."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.types import GenerationRequest, ServingModel
from app.errors import InvalidRequestError


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Server-side bounds on one request (`MAX_TOKENS_LIMIT`, `MAX_N`); None is no bound."""

    max_tokens: int | None = None
    max_n: int | None = None


def check_request(request: GenerationRequest, model: ServingModel, limits: RequestLimits) -> None:
    """Refuse, naming the field, what the server or this model cannot serve."""
    where = request.parameters_field
    max_tokens = request.sampling.get("max_tokens")
    context_length = model.engine.max_model_len
    if max_tokens is not None and max_tokens > context_length:
        raise InvalidRequestError(
            f"{where}.max_tokens: {max_tokens} is above the model's context length of "
            f"{context_length} tokens"
        )
    check_limits(
        {
            f"{where}.max_tokens": (max_tokens, limits.max_tokens),
            f"{where}.n": (request.sampling.get("n"), limits.max_n),
        }
    )


def check_limits(values: dict[str, tuple[int | None, int | None]]) -> None:
    """Refuse the first value above its limit: field name -> (value, limit); None is unset."""
    for field, (value, limit) in values.items():
        if limit is not None and value is not None and value > limit:
            raise InvalidRequestError(f"{field}: {value} is above this server's limit of {limit}", param=field)
