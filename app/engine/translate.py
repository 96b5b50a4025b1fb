"""Turns a validated `GenerateRequest` into what the engine runs, as the vLLM backend does."""

from __future__ import annotations

import base64
import binascii
import difflib
import io
import json
import re
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

import msgspec
from pydantic import ValidationError
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

from app.engine.registry import ServedModel
from app.engine.types import GenerationRequest, LoraAdapter
from app.errors import InvalidRequestError, format_validation_errors
from app.schemas.generate import GenerateRequest, SamplingParameters

SERVER_PARAMETERS = ("stream", "lora_name", "apply_chat_template")
"""Keys of `parameters` read by the server itself, not passed to `SamplingParams`."""

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


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Server-side bounds on what one request may ask for."""

    max_tokens: int | None = None
    max_n: int | None = None
    timeout_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Which additional outputs the client asked for."""

    finish_reason: bool = False
    cumulative_logprob: bool = False
    logprobs: bool = False
    num_input_tokens: bool = False
    num_output_tokens: bool = False


@dataclass(slots=True)
class GenerationPlan:
    """A request ready to run: what the engine gets and how to answer."""

    engine_request: GenerationRequest
    text_input: str
    stream: bool
    prepend_input: bool
    outputs: OutputOptions
    n: int
    logprobs_requested: bool
    timeout_seconds: float | None = None


@cache
def settable_sampling_fields() -> frozenset[str]:
    fields = getattr(SamplingParams, "__struct_fields__", ())
    return frozenset(f for f in fields if not f.startswith("_")) - HIDDEN_SAMPLING_FIELDS


def plan_generation(
    body: GenerateRequest,
    model: ServedModel,
    stream_default: bool,
    limits: RequestLimits = RequestLimits(),
) -> GenerationPlan:
    """Validate everything the engine would reject later and build the engine request."""
    parameters = collect_parameters(body)
    check_limits(parameters, limits, model.engine.max_model_len)
    stream = first_set(body.stream, parameters.pop("stream", None), stream_default)
    lora_name = parameters.pop("lora_name", None)
    use_chat = first_set(parameters.pop("apply_chat_template", None), model.chat_template_by_default)

    if body.exclude_input_in_output is None:
        prepend_input = not stream
    else:
        prepend_input = not body.exclude_input_in_output
    if prepend_input and stream:
        raise InvalidRequestError(
            "When streaming, `exclude_input_in_output` = False is not allowed."
        )

    outputs = OutputOptions(
        finish_reason=bool(body.return_finish_reason),
        cumulative_logprob=bool(body.return_cumulative_logprob),
        logprobs=bool(body.return_logprobs),
        num_input_tokens=bool(body.return_num_input_tokens),
        num_output_tokens=bool(body.return_num_output_tokens),
    )
    logprobs_requested = parameters.get("logprobs") is not None
    if outputs.cumulative_logprob and not logprobs_requested:
        parameters["logprobs"] = 0
    sampling = build_sampling_params(parameters, stream)
    prompt = model.engine.render_chat_prompt(body.text_input) if use_chat else body.text_input
    request = GenerationRequest(
        request_id=uuid.uuid4().hex,
        prompt=prompt,
        sampling_params=sampling,
        images=decode_images(body.image, model),
        lora=resolve_lora(lora_name, model),
    )
    return GenerationPlan(
        engine_request=request,
        text_input=body.text_input,
        stream=stream,
        prepend_input=prepend_input,
        outputs=outputs,
        n=sampling.n,
        logprobs_requested=logprobs_requested,
        timeout_seconds=limits.timeout_seconds,
    )


def check_limits(parameters: dict[str, Any], limits: RequestLimits, context_length: int) -> None:
    max_tokens = parameters.get("max_tokens")
    if max_tokens is not None and max_tokens > context_length:
        raise InvalidRequestError(
            f"parameters.max_tokens: {max_tokens} is above the model's context length of {context_length} tokens"
        )
    for key, limit in (("max_tokens", limits.max_tokens), ("n", limits.max_n)):
        value = parameters.get(key)
        if limit is not None and value is not None and value > limit:
            raise InvalidRequestError(f"parameters.{key}: {value} is above this server's limit of {limit}")


def load_json_text(text: str, location: str) -> Any:
    """JSON carried inside a string field, or a 400 naming the field."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"{location}: invalid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequestError(f"{location}: JSON nested too deeply") from exc


def first_set(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def collect_parameters(body: GenerateRequest) -> dict[str, Any]:
    """The request's parameters: `sampling_parameters` if given (as the backend does),
    else `parameters` plus any unknown top-level keys (Triton passes those as parameters)."""
    if body.sampling_parameters is not None:
        raw = load_json_text(body.sampling_parameters, "sampling_parameters")
        if not isinstance(raw, dict):
            raise InvalidRequestError("sampling_parameters: must be a JSON object")
        return validated_parameters(raw, "sampling_parameters")
    merged = validated_parameters(dict(body.model_extra or {}), "")
    if body.parameters is not None:
        merged.update(dump_parameters(body.parameters))
    return merged


def validated_parameters(raw: dict[str, Any], location: str) -> dict[str, Any]:
    try:
        parsed = SamplingParameters.model_validate(raw)
    except ValidationError as exc:
        message = format_validation_errors(exc.errors())
        raise InvalidRequestError(f"{location}.{message}" if location else message) from exc
    return dump_parameters(parsed)


def dump_parameters(parameters: SamplingParameters) -> dict[str, Any]:
    return parameters.model_dump(exclude_none=True)


def build_sampling_params(parameters: dict[str, Any], stream: bool) -> Any:
    """A vLLM `SamplingParams`, or a 400 naming the parameter vLLM rejects."""
    known = settable_sampling_fields()
    for key in parameters:
        if key not in known and key not in ("guided_decoding",):
            hint = difflib.get_close_matches(key, known, n=1)
            suffix = f"; did you mean '{hint[0]}'?" if hint else ""
            raise InvalidRequestError(f"parameters.{key}: unknown sampling parameter{suffix}")
    guided = parameters.pop("guided_decoding", None)
    if "structured_outputs" in parameters or guided is not None:
        parameters["structured_outputs"] = structured_outputs(
            parameters.get("structured_outputs", guided)
        )
    coerce_undeclared(parameters)
    kind = RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY
    try:
        return SamplingParams(**parameters, output_kind=kind)
    except Exception as exc:  # vLLM validates in __post_init__ with several exception types
        raise InvalidRequestError(f"parameters: {exc}") from exc


def coerce_undeclared(parameters: dict[str, Any]) -> None:
    """Convert the parameters our schema does not declare to vLLM's own field types
    (`SamplingParams` takes any value; a wrong type would fail later, in the engine)."""
    undeclared = [k for k in parameters if k not in SamplingParameters.model_fields]
    if not undeclared:
        return
    try:
        converted = msgspec.convert({k: parameters[k] for k in undeclared}, SamplingParams, strict=False)
    except msgspec.ValidationError as exc:
        message, _, where = str(exc).partition(" - at ")
        field = re.search(r"\$\.(\w+)", where)
        raise InvalidRequestError(f"parameters.{field.group(1) if field else ''}: {message}") from exc
    except Exception as exc:  # vLLM's __post_init__ checks values too
        raise InvalidRequestError(f"parameters: {exc}") from exc
    parameters.update({k: getattr(converted, k) for k in undeclared})


def structured_outputs(value: Any) -> Any:
    if isinstance(value, str):
        value = load_json_text(value, "parameters.structured_outputs")
    if not isinstance(value, dict):
        raise InvalidRequestError("parameters.structured_outputs: must be a JSON object")
    value = {k: v for k, v in value.items() if k != "backend"}
    try:
        return StructuredOutputsParams(**value)
    except Exception as exc:
        raise InvalidRequestError(f"parameters.structured_outputs: {exc}") from exc


def resolve_lora(name: str | None, model: ServedModel) -> LoraAdapter | None:
    """The adapter for `lora_name`, with the backend's error messages."""
    if name is None:
        return None
    loras = model.spec.loras
    if loras is None:
        raise InvalidRequestError("LoRA feature is not enabled.")
    if name not in loras:
        raise InvalidRequestError(
            f"LoRA {name} is not supported, we currently support {list(loras)}"
        )
    return LoraAdapter(name=name, int_id=list(loras).index(name) + 1, path=loras[name])


def decode_images(images: list[str] | str | None, model: ServedModel) -> list[Any]:
    """Decode base64 images with Pillow into RGB images for vLLM's multi_modal_data."""
    if not images:
        return []
    if isinstance(images, str):
        images = [images]
    if not model.engine.supports_images:
        raise InvalidRequestError(f"image: model '{model.name}' takes no images")
    from PIL import Image, UnidentifiedImageError

    decoded = []
    for index, data in enumerate(images):
        try:
            raw = base64.b64decode(data, validate=True)
            decoded.append(Image.open(io.BytesIO(raw)).convert("RGB"))
        except (binascii.Error, ValueError, UnidentifiedImageError, OSError) as exc:
            raise InvalidRequestError(f"image.{index}: not a base64-encoded image ({exc})") from exc
    return decoded
