"""A neutral request's sampling values as vLLM's `SamplingParams`, or a 400 naming the field."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import msgspec
from pydantic import ValidationError
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

from app.errors import InvalidRequestError, did_you_mean
from app.schemas.validation import invalid_request, json_object_text

SET_BY_SERVER = "the server sets it (it decides how the server reads the engine's outputs)"
NO_PROMPT_SCORES = (
    "Triton's outputs carry no prompt log-probabilities (OpenAI's /v1/completions and "
    "/v1/chat/completions return them)"
)
HIDDEN_SAMPLING_FIELDS: dict[str, str] = {
    "output_kind": SET_BY_SERVER,
    "detokenize": SET_BY_SERVER,
    "flat_logprobs": SET_BY_SERVER,
    "stream_interval": SET_BY_SERVER,
    "skip_clone": SET_BY_SERVER,
    "output_text_buffer_length": SET_BY_SERVER,
    "extra_args": SET_BY_SERVER,
    "routed_experts_prompt_start": SET_BY_SERVER,
    "trace_decode_token_ids": SET_BY_SERVER,
    "skip_reading_prefix_cache": SET_BY_SERVER,
    "prompt_logprobs": NO_PROMPT_SCORES,
    "prompt_logprob_token_ids": NO_PROMPT_SCORES,
    "prompt_logprob_start": NO_PROMPT_SCORES,
}
"""`SamplingParams` fields a request may not set, and why (said in the refusal)."""

OLDER_NAMES = {"guided_decoding": "structured_outputs"}
"""Parameter names older vLLM releases used, as the backend still accepts them."""

FIELD_IN_ERROR = re.compile(r"\$\.(\w+)")


@cache
def settable_sampling_fields() -> frozenset[str]:
    fields = getattr(SamplingParams, "__struct_fields__", ())
    return frozenset(f for f in fields if not f.startswith("_")) - HIDDEN_SAMPLING_FIELDS.keys()


def to_sampling_params(
    sampling: dict[str, Any], stream: bool, where: str = "parameters"
) -> SamplingParams:
    """Validate and convert in one step (msgspec, to vLLM's own field types, then vLLM's
    own checks): DELTA outputs when streaming, one FINAL_ONLY output otherwise."""
    values = known_values(sampling, where)
    if "structured_outputs" in values:
        values["structured_outputs"] = structured_outputs(values["structured_outputs"], where)
    kind = RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY
    values["output_kind"] = kind.value
    try:
        return msgspec.convert(values, SamplingParams, strict=False)
    except msgspec.ValidationError as exc:
        message, _, location = str(exc).partition(" - at ")
        field = FIELD_IN_ERROR.search(location)
        raise InvalidRequestError(
            f"{where}.{field.group(1)}: {message}" if field else f"{where}: {message}"
        ) from exc
    except Exception as exc:  # vLLM validates in __post_init__ with several exception types
        raise InvalidRequestError(f"{where}: {exc}") from exc


def known_values(sampling: dict[str, Any], where: str) -> dict[str, Any]:
    """The values under vLLM's current names; a field a request may not set is a 400 saying
    why, an unknown name one with a suggestion."""
    known = settable_sampling_fields()
    values = {}
    for key, value in sampling.items():
        name = OLDER_NAMES.get(key, key)
        if name in HIDDEN_SAMPLING_FIELDS:
            reason = HIDDEN_SAMPLING_FIELDS[name]
            raise InvalidRequestError(f"{where}.{key}: not taken from a request: {reason}")
        if name not in known:
            raise InvalidRequestError(
                f"{where}.{key}: unknown sampling parameter{did_you_mean(key, known)}"
            )
        if key == name or name not in sampling:
            values[name] = value
    return values


def structured_outputs(value: Any, where: str) -> StructuredOutputsParams:
    """vLLM's `StructuredOutputsParams` from an object or its JSON text (`backend` ignored:
    the engine's choice holds)."""
    field = f"{where}.structured_outputs"
    if isinstance(value, str):
        value = json_object_text(value, field)
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{field}: must be a JSON object")
    try:
        return StructuredOutputsParams(**{k: v for k, v in value.items() if k != "backend"})
    except ValidationError as exc:
        raise invalid_request(exc, field) from exc
    except Exception as exc:
        raise InvalidRequestError(f"{field}: {exc}") from exc
