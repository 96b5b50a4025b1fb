"""Bounds on what one request may ask for: the server's limits and the model's context.

Every check here costs O(1) per field (a length, a comparison), so a frontend runs them
before any work whose size the request chooses (lists of `n` choices, decoded images,
tokenized stop words...): a request far above a limit is refused as fast as one just above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.types import InferenceEngine, ValidRequest
from app.core.types import integer as integer
from app.errors import InvalidRequestError
from app.schemas.generate import ENGINE_MAX_TOKENS

STOP_FIELDS = ("stop", "bad_words")
"""Strings matched against the output at every step (bad words tokenized first)."""
GRAMMAR_FIELDS = (
    "structured_outputs",
    "guided_decoding",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structural_tag",
    "response_format",
    "text",
)
"""Fields that become a grammar the engine compiles (vLLM's names, old and new, and OpenAI's:
`response_format`, and the Responses API's `text`, whose `format` holds the schema)."""
FORCED_TOOL_CHOICES = ("required",)
"""An OpenAI `tool_choice` that makes the tools' parameters a grammar (as a named tool does)."""
TOKEN_ID_FIELDS = ("stop_token_ids", "allowed_token_ids", "logit_bias", "logprob_token_ids")
"""Lists (or maps) of token ids."""
REPETITION_FIELD = "repetition_detection"
"""vLLM's search of the output for a repeated pattern, at every step, of each size up to
its `max_pattern_size` (each size costs a pass of Python, until the output is too short)."""
MAX_NAME_LENGTH = 256
"""Model, version and LoRA adapter names longer than this name nothing the server serves."""


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Server-side bounds on one request; None is no bound."""

    max_tokens: int | None = None
    max_n: int | None = None
    max_stop: int | None = 64
    """Stop strings (and bad words) in one request."""
    max_stop_bytes: int | None = 16384
    """UTF-8 bytes of a request's stop strings and bad words together."""
    max_grammar_bytes: int | None = 65536
    """Bytes of a request's grammar as JSON text (schema, regex, grammar, choices...)."""
    max_token_ids: int | None = 4096
    """Entries of each token-id list: stop_token_ids, allowed_token_ids, logit_bias..."""
    max_images: int | None = 16
    max_image_pixels: int | None = 4096 * 4096
    max_prompts: int | None = 64
    """Prompts of one OpenAI completions request (each is an engine request)."""
    max_messages: int | None = 2048
    """Messages of one OpenAI conversation (chat's `messages`, the Responses API's `input`
    items), as OpenAI's API bounds them."""
    max_content_parts: int | None = 4096
    """Content parts and tool calls of one conversation's messages together."""
    max_tools: int | None = 128
    """Tools one OpenAI request may offer, as OpenAI's API bounds them."""
    max_repetition_pattern: int | None = 256
    """`repetition_detection.max_pattern_size`: pattern sizes the engine tries at every step."""
    max_logprob_entries: int | None = 4_194_304
    """Log-probabilities one request may ask for (`logprob_entries`), all held in memory
    until its response is written (some 220 bytes each)."""
    max_beam_search_positions: int | None = 67_108_864
    """Token positions an OpenAI beam search may keep: beams x new tokens x (prompt + new
    tokens), per prompt (vLLM keeps every beam that ended; some 13 bytes each)."""


def check_context(
    request: ValidRequest, engine: InferenceEngine, limits: RequestLimits | None = None
) -> None:
    """Refuse, naming the field, a request the engine it was routed to cannot serve: more new
    tokens than the model's context holds; or, within `limits`, more log-probabilities than
    the server's bound (`check_logprobs_made`). (The rest of the server's limits were
    checked when the request was built.)"""
    context_length = engine.max_model_len
    if request.max_tokens is not None and request.max_tokens > context_length:
        raise InvalidRequestError(
            f"{request.parameters_field}.max_tokens: {request.max_tokens} is above the model's "
            f"context length of {context_length} tokens"
        )
    if limits is not None:
        check_logprobs_made(request, engine, limits.max_logprob_entries)


def check_logprobs_made(request: ValidRequest, engine: InferenceEngine, limit: int | None) -> None:
    """The log-probabilities a request makes: `n` x `max_tokens` (vLLM's default where unset)
    x (the alternatives computed + 1). A `logprobs` above the model's own bound is the
    engine's to refuse, in its words."""
    logprobs = integer(request.sampling.get("logprobs"))
    if logprobs is not None and 0 <= engine.max_logprobs < logprobs:
        return
    alternatives, field = alternatives_computed(logprobs, request.sampling)
    positions = request.max_tokens if request.max_tokens is not None else ENGINE_MAX_TOKENS
    entries = logprob_entries(request.n, positions, alternatives)
    check_logprob_entries(f"{request.parameters_field}.{field}", entries, limit)


def alternatives_computed(
    logprobs: int | None, sampling: Mapping[str, Any], logprobs_field: str = "logprobs"
) -> tuple[int | None, str]:
    """The alternatives the engine computes at each new token, as vLLM's `num_logprobs`
    reads them, and the field that asks for them: the length of a `logprob_token_ids` list
    where one is given (the tokens it names), else `logprobs`."""
    token_ids = sampling.get("logprob_token_ids")
    if isinstance(token_ids, list) and token_ids:
        return len(token_ids), "logprob_token_ids"
    return logprobs, logprobs_field


def check_sampling(
    sampling: Mapping[str, Any],
    limits: RequestLimits,
    where: str = "",
    max_tokens_field: str = "max_tokens",
) -> None:
    """Refuse, naming the field (under `where`), a sampling value above the server's limits:
    `n`, `max_tokens` (or `max_tokens_field`), and the length of every list or search the
    engine works through at each step. Values of the wrong type are left to the schema."""
    prefix = f"{where}." if where else ""
    check_limits(
        {
            f"{prefix}{max_tokens_field}": (
                integer(sampling.get(max_tokens_field)),
                limits.max_tokens,
            ),
            f"{prefix}n": (integer(sampling.get("n")), limits.max_n),
            f"{prefix}{REPETITION_FIELD}.max_pattern_size": (
                max_pattern_size(sampling.get(REPETITION_FIELD)),
                limits.max_repetition_pattern,
            ),
        }
    )
    stops = sum(count_of(sampling.get(name)) for name in STOP_FIELDS)
    if limits.max_stop is not None and stops > limits.max_stop:
        field = next(name for name in STOP_FIELDS if count_of(sampling.get(name)))
        check_count(f"{prefix}{field}", stops, limits.max_stop, "stop strings and bad words")
    for name in TOKEN_ID_FIELDS:
        check_count(f"{prefix}{name}", count_of(sampling.get(name)), limits.max_token_ids)
    check_bytes(
        prefix, sampling, STOP_FIELDS, limits.max_stop_bytes, "stop strings and bad words are"
    )
    grammar = grammar_fields(sampling)
    check_bytes(prefix, sampling, grammar, limits.max_grammar_bytes, "the grammar is")


def max_pattern_size(repetition: Any) -> int | None:
    """`repetition_detection`'s largest pattern size, as sent (a JSON object) or as vLLM
    read it (its `RepetitionDetectionParams`)."""
    if isinstance(repetition, Mapping):
        return integer(repetition.get("max_pattern_size"))
    return integer(getattr(repetition, "max_pattern_size", None))


def grammar_fields(sampling: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields of `sampling` that the engine compiles into a grammar."""
    tool_choice = sampling.get("tool_choice")
    forced = isinstance(tool_choice, dict) or tool_choice in FORCED_TOOL_CHOICES
    return (*GRAMMAR_FIELDS, "tools") if forced else GRAMMAR_FIELDS


def check_bytes(
    prefix: str, sampling: Mapping[str, Any], fields: tuple[str, ...], limit: int | None, what: str
) -> None:
    """Refuse fields whose JSON text together is over `limit` bytes, naming the field where
    the total went over: counted no further than the limit, so a huge value costs no more."""
    if limit is None:
        return
    total = 0
    for name in fields:
        value = sampling.get(name)
        if value is None:
            continue
        total += json_size(value, limit - total)
        if total > limit:
            raise InvalidRequestError(
                f"{prefix}{name}: {what} over this server's limit of {limit} bytes",
                param=f"{prefix}{name}",
            )


def json_size(value: Any, budget: int) -> int:
    """The bytes of `value` as JSON text (UTF-8, strings with their quotes), counted until
    they pass `budget`: then some count above it."""
    size = 0
    stack = [value]
    while stack and size <= budget:
        item = stack.pop()
        if isinstance(item, str):
            size += 2 + (len(item) if item.isascii() else len(item.encode(errors="replace")))
        elif isinstance(item, dict):
            size += 1 + 2 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            size += 1 + len(item)
            stack.extend(item)
        elif isinstance(item, bool) or item is None:
            size += 5
        elif isinstance(item, int) and abs(item) >= 10**20:
            size += budget + 1  # a number as long as this is no grammar's
        else:
            size += len(str(item))
    return size


def check_limits(values: dict[str, tuple[int | None, int | None]]) -> None:
    """Refuse the first value above its limit: field name -> (value, limit); None is unset."""
    for field, (value, limit) in values.items():
        if limit is not None and value is not None and value > limit:
            raise InvalidRequestError(
                f"{field}: {value} is above this server's limit of {limit}", param=field
            )


def logprob_entries(sequences: int, positions: int, alternatives: int | None) -> int:
    """The log-probabilities `sequences` of up to `positions` tokens each hold when each
    position has `alternatives` (None: none asked for) besides its own token's."""
    if alternatives is None or alternatives < 0:
        return 0
    return sequences * positions * (alternatives + 1)


def check_logprob_entries(field: str, entries: int, limit: int | None) -> None:
    """Refuse, naming `field`, a request that may make more log-probabilities than `limit`:
    the engine's outputs keep them until the response is written (a non-streamed response
    whole, a stream's chunks while its client does not read)."""
    if limit is not None and entries > limit:
        raise InvalidRequestError(
            f"{field}: the request may make {entries:,} log-probabilities (choices x tokens x "
            f"(alternatives + 1)), above this server's limit of {limit:,}: ask for fewer new "
            "tokens, choices or alternatives",
            param=field,
        )


def unset_max_tokens(engine_default: int | None, limit: int | None) -> int | None:
    """The new tokens a request that sets no bound asks: the engine's default for it within
    the server's limit (the limit where the engine has none, to stop short of the context)."""
    if limit is None:
        return engine_default
    return limit if engine_default is None else min(engine_default, limit)


def check_count(field: str, count: int, limit: int | None, what: str = "items") -> None:
    """Refuse a list of more than `limit` entries."""
    if limit is not None and count > limit:
        raise InvalidRequestError(
            f"{field}: {count} {what} are above this server's limit of {limit}", param=field
        )


def check_name(field: str, name: str | None, what: str = "a name") -> None:
    """Refuse a name (or an id, `what`) too long to be one the server serves or repeats
    (before any lookup, message or response repeats it)."""
    if name is not None and len(name) > MAX_NAME_LENGTH:
        raise InvalidRequestError(
            f"{field}: {what} of {len(name)} characters is longer than {MAX_NAME_LENGTH}",
            param=field,
        )


def count_prompts(prompt: Any) -> int:
    """How many prompts (engine requests) an OpenAI completions `prompt` holds: a list of
    texts or of token lists is several; a text or one token list is one."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        return len(prompt)
    return 0 if prompt is None else 1


def count_of(value: Any) -> int:
    """Entries of a list or map; one for a single string; none when unset."""
    if value is None:
        return 0
    if isinstance(value, (list, tuple, dict, set)):
        return len(value)
    return 1
