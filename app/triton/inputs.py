"""The backend's inputs as a neutral request: the Triton vLLM backend's reading of a request."""

from __future__ import annotations

import base64
import binascii
import io
import json
import uuid
from dataclasses import dataclass
from typing import Any

from app.core.limits import RequestLimits, check_count, check_name, check_sampling
from app.core.types import LoraAdapter, ValidRequest
from app.errors import InvalidRequestError
from app.repository.served_model import ServedModel
from app.schemas.generate import GenerateRequest, SamplingParameters
from app.schemas.validation import check_unicode, validate_data
from app.triton.model_config import BACKEND_INPUTS

APPLY_CHAT_TEMPLATE = "APPLY_CHAT_TEMPLATE"
"""config.pbtxt parameter: wrap prompts in the model's chat template unless a request says no."""
PARAMETERS_FIELD = "parameters"
STREAM_WITH_INPUT_MESSAGE = (
    "Error generating stream: When streaming, `exclude_input_in_output` = False is not allowed."
)
"""The backend's text, as its CI checks it (the backend raises it inside its generation loop)."""
DEFAULT_LIMITS = RequestLimits()
INPUT_NAMES = frozenset(name for name, *_ in BACKEND_INPUTS)
"""The model's input names: a key inside `parameters` with one of these names is that input."""


@dataclass(frozen=True, slots=True)
class StreamPolicy:
    """How a route or RPC decides between a stream and one response, before anything else."""

    default: bool
    refusal: str | None = None
    """The error for a client asking to stream where only one response can be sent."""


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Which additional outputs the client asked for."""

    finish_reason: bool = False
    cumulative_logprob: bool = False
    logprobs: bool = False
    num_input_tokens: bool = False
    num_output_tokens: bool = False


@dataclass(slots=True)
class TritonRequest:
    """A generate request in the backend's terms: the neutral request for the core, and what
    the response must hold."""

    generation: ValidRequest
    text_input: str
    prepend_input: bool
    outputs: OutputOptions
    logprobs_requested: bool

    @property
    def stream(self) -> bool:
        return self.generation.stream

    @property
    def n(self) -> int:
        return self.generation.n


def triton_request(
    body: GenerateRequest,
    model: ServedModel,
    policy: StreamPolicy,
    limits: RequestLimits = DEFAULT_LIMITS,
) -> TritonRequest:
    """Read the request as the backend does; every invalid input is a 400 naming its field.
    The server's limits are checked before any work whose size the request chooses."""
    body = lift_inputs(body)
    parameters = collect_parameters(body)
    check_sampling(parameters, limits, PARAMETERS_FIELD)
    check_count("image", image_count(body.image), limits.max_images)
    stream = first_set(body.stream, parameters.pop("stream", None), policy.default)
    if stream and policy.refusal:
        raise InvalidRequestError(policy.refusal)
    lora_name = parameters.pop("lora_name", None)
    chat_template = first_set(
        parameters.pop("apply_chat_template", None), model.spec.flag(APPLY_CHAT_TEMPLATE)
    )
    if body.exclude_input_in_output is None:
        prepend_input = not stream
    else:
        prepend_input = not body.exclude_input_in_output
    if prepend_input and stream:
        raise InvalidRequestError(STREAM_WITH_INPUT_MESSAGE)
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
    generation = ValidRequest(
        request_id=uuid.uuid4().hex,
        prompt=body.text_input,
        sampling=parameters,
        stream=stream,
        chat_template=bool(chat_template),
        images=decode_images(body.image, model, limits.max_image_pixels),
        lora=resolve_lora(lora_name, model),
        parameters_field=PARAMETERS_FIELD,
    )
    return TritonRequest(generation, body.text_input, prepend_input, outputs, logprobs_requested)


def lift_inputs(body: GenerateRequest) -> GenerateRequest:
    """Triton's mapping of the generate extension: a key inside `parameters` that names a
    model input (`exclude_input_in_output`, `return_logprobs`, ...) is that input, not a
    sampling parameter. `stream` stays where the schema reads it (both places mean the same)."""
    extra = body.parameters.model_extra if body.parameters is not None else None
    lifted = {key: value for key, value in (extra or {}).items() if key in INPUT_NAMES}
    if not lifted or body.parameters is None:
        return body
    for key in lifted:
        if key == "text_input" or getattr(body, key) is not None:
            raise InvalidRequestError(f"{PARAMETERS_FIELD}.{key}: also given as the input '{key}'")
    inputs = validate_data(
        GenerateRequest, {"text_input": body.text_input, **lifted}, PARAMETERS_FIELD
    )
    parameters = body.parameters.model_copy()
    parameters.__pydantic_extra__ = {k: v for k, v in (extra or {}).items() if k not in lifted}
    return body.model_copy(
        update={"parameters": parameters, **{key: getattr(inputs, key) for key in lifted}}
    )


def first_set(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def collect_parameters(body: GenerateRequest) -> dict[str, Any]:
    """The request's parameters: `sampling_parameters` if given (as the backend does),
    else `parameters` plus any unknown top-level keys (Triton passes those as parameters)."""
    if body.sampling_parameters is not None:
        raw = load_json_text(body.sampling_parameters, "sampling_parameters")
        if not isinstance(raw, dict):
            raise InvalidRequestError("sampling_parameters: must be a JSON object")
        return dump_parameters(validate_data(SamplingParameters, raw, "sampling_parameters"))
    merged = dump_parameters(validate_data(SamplingParameters, dict(body.model_extra or {})))
    if body.parameters is not None:
        merged.update(dump_parameters(body.parameters))
    return merged


def load_json_text(text: str, location: str) -> Any:
    """JSON carried inside a string field, or a 400 naming the field (a lone surrogate
    escaped in it too)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"{location}: invalid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequestError(f"{location}: JSON nested too deeply") from exc
    check_unicode(value, location)
    return value


def dump_parameters(parameters: SamplingParameters) -> dict[str, Any]:
    return parameters.model_dump(exclude_none=True)


def resolve_lora(name: str | None, model: ServedModel) -> LoraAdapter | None:
    """The adapter for `lora_name`, with the backend's error messages."""
    if name is None:
        return None
    check_name(f"{PARAMETERS_FIELD}.lora_name", name)
    loras = model.spec.loras
    if loras is None:
        raise InvalidRequestError("LoRA feature is not enabled.")
    if name not in loras:
        raise InvalidRequestError(
            f"LoRA {name} is not supported, we currently support {list(loras)}"
        )
    return LoraAdapter(name=name, int_id=list(loras).index(name) + 1, path=loras[name])


def image_count(images: list[str] | str | None) -> int:
    if not images:
        return 0
    return 1 if isinstance(images, str) else len(images)


def decode_images(
    images: list[str] | str | None, model: ServedModel, max_pixels: int | None = None
) -> list[Any]:
    """Decode base64 images with Pillow into RGB images, as the backend does. A model that
    takes no images refuses them first (a model not ready yet is refused at admission); an
    image of more than `max_pixels` is refused from its header, before it is decoded."""
    if not images:
        return []
    if isinstance(images, str):
        images = [images]
    if model.is_ready and not model.engine.supports_images:
        raise InvalidRequestError(f"image: model '{model.name}' takes no images")
    return [decode_image(data, f"image.{index}", max_pixels) for index, data in enumerate(images)]


def decode_image(data: str, field: str, max_pixels: int | None) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(base64.b64decode(data, validate=True)))
        width, height = image.size
        if max_pixels is not None and width * height > max_pixels:
            raise InvalidRequestError(
                f"{field}: {width}x{height} pixels are above this server's limit of {max_pixels}",
                param=field,
            )
        return image.convert("RGB")
    except (
        binascii.Error,
        ValueError,
        UnidentifiedImageError,
        OSError,
        Image.DecompressionBombError,
    ) as exc:
        raise InvalidRequestError(
            f"{field}: not a base64-encoded image ({exc})", param=field
        ) from exc
