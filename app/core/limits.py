"""Bounds on what one request may ask for: the server's limits and the model's context.

Every check here costs O(1) per field (a length, a comparison), so a frontend runs them
before any work whose size the request chooses (lists of `n` choices, decoded images,
tokenized stop words...): a request far above a limit is refused as fast as one just above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.types import GenerationRequest, InferenceEngine
from app.errors import InvalidRequestError

STOP_FIELDS = ("stop", "bad_words")
"""Strings matched against the output at every step."""
TOKEN_ID_FIELDS = ("stop_token_ids", "allowed_token_ids", "logit_bias", "logprob_token_ids")
"""Lists (or maps) of token ids."""
MAX_NAME_LENGTH = 256
"""Model, version and LoRA adapter names longer than this name nothing the server serves."""


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Server-side bounds on one request; None is no bound."""

    max_tokens: int | None = None
    max_n: int | None = None
    max_stop: int | None = 64
    """Stop strings (and bad words) in one request."""
    max_token_ids: int | None = 4096
    """Entries of each token-id list: stop_token_ids, allowed_token_ids, logit_bias..."""
    max_images: int | None = 16
    max_image_pixels: int | None = 4096 * 4096
    max_prompts: int | None = 64
    """Prompts of one OpenAI completions request (each is an engine request)."""


def check_request(
    request: GenerationRequest, engine: InferenceEngine, limits: RequestLimits
) -> None:
    """Refuse, naming the field, what the server or the model's engine cannot serve."""
    where = request.parameters_field
    check_sampling(request.sampling, limits, where)
    check_count("image", len(request.images), limits.max_images)
    max_tokens = request.sampling.get("max_tokens")
    context_length = engine.max_model_len
    if isinstance(max_tokens, int) and max_tokens > context_length:
        raise InvalidRequestError(
            f"{where}.max_tokens: {max_tokens} is above the model's context length of "
            f"{context_length} tokens"
        )


def check_sampling(
    sampling: Mapping[str, Any],
    limits: RequestLimits,
    where: str = "",
    max_tokens_field: str = "max_tokens",
) -> None:
    """Refuse, naming the field (under `where`), a sampling value above the server's limits:
    `n`, `max_tokens` (or `max_tokens_field`), and the length of every list the engine
    works through at each step. Values of the wrong type are left to the schema."""
    prefix = f"{where}." if where else ""
    check_limits(
        {
            f"{prefix}{max_tokens_field}": (
                integer(sampling.get(max_tokens_field)),
                limits.max_tokens,
            ),
            f"{prefix}n": (integer(sampling.get("n")), limits.max_n),
        }
    )
    stops = sum(count_of(sampling.get(name)) for name in STOP_FIELDS)
    if limits.max_stop is not None and stops > limits.max_stop:
        field = next(name for name in STOP_FIELDS if count_of(sampling.get(name)))
        check_count(f"{prefix}{field}", stops, limits.max_stop, "stop strings and bad words")
    for name in TOKEN_ID_FIELDS:
        check_count(f"{prefix}{name}", count_of(sampling.get(name)), limits.max_token_ids)


def check_limits(values: dict[str, tuple[int | None, int | None]]) -> None:
    """Refuse the first value above its limit: field name -> (value, limit); None is unset."""
    for field, (value, limit) in values.items():
        if limit is not None and value is not None and value > limit:
            raise InvalidRequestError(
                f"{field}: {value} is above this server's limit of {limit}", param=field
            )


def check_count(field: str, count: int, limit: int | None, what: str = "items") -> None:
    """Refuse a list of more than `limit` entries."""
    if limit is not None and count > limit:
        raise InvalidRequestError(
            f"{field}: {count} {what} are above this server's limit of {limit}", param=field
        )


def check_name(field: str, name: str | None) -> None:
    """Refuse a name too long to be one the server serves (before any lookup or message
    repeats it)."""
    if name is not None and len(name) > MAX_NAME_LENGTH:
        raise InvalidRequestError(
            f"{field}: a name of {len(name)} characters is longer than {MAX_NAME_LENGTH}",
            param=field,
        )


def count_of(value: Any) -> int:
    """Entries of a list or map; one for a single string; none when unset."""
    if value is None:
        return 0
    if isinstance(value, (list, tuple, dict, set)):
        return len(value)
    return 1


def integer(value: Any) -> int | None:
    """An integer value (bools and other types are the schema's to refuse)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
