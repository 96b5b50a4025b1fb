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

HIDDEN_SAMPLING_FIELDS = frozenset(
    {
        "output_kind",
        "detokenize",
        "flat_logprobs",
        "stream_interval",
        "skip_clone",
        "output_text_buffer_length",
        "extra_args",
        "prompt_logprobs",
        "prompt_logprob_token_ids",
        "prompt_logprob_start",
        "routed_experts_prompt_start",
        "trace_decode_token_ids",
        "skip_reading_prefix_cache",
    }
)
"""`SamplingParams` fields a request may not set: they change how the server reads outputs."""

OLDER_NAMES = {"guided_decoding": "structured_outputs"}
"""Parameter names older vLLM releases used, as the backend still accepts them."""

FIELD_IN_ERROR = re.compile(r"\$\.(\w+)")


@cache
def settable_sampling_fields() -> frozenset[str]:
    fields = getattr(SamplingParams, "__struct_fields__", ())
    return frozenset(f for f in fields if not f.startswith("_")) - HIDDEN_SAMPLING_FIELDS


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
    """The values under vLLM's current names; an unknown name is a 400 with a suggestion."""
    known = settable_sampling_fields()
    values = {}
    for key, value in sampling.items():
        name = OLDER_NAMES.get(key, key)
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
