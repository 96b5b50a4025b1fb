"""The backend's reading of a request: its inputs (app/triton/inputs.py) as the valid request
the core runs, built once per request for Triton HTTP, the SSE and EventSource streams and
gRPC."""

from __future__ import annotations

import base64
import binascii
import io
import uuid
from dataclasses import dataclass
from typing import Any

from app.core.limits import RequestLimits, check_name
from app.core.types import LoraAdapter, ValidRequest
from app.errors import InvalidRequestError
from app.repository.served_model import ServedModel
from app.triton.inputs import DEFAULT_LIMITS, PARAMETERS_FIELD, TritonInputs
from app.triton.tensors import OUTPUTS

APPLY_CHAT_TEMPLATE = "APPLY_CHAT_TEMPLATE"
"""config.pbtxt parameter: wrap prompts in the model's chat template unless a request says no."""
STREAM_WITH_INPUT_MESSAGE = (
    "Error generating stream: When streaming, `exclude_input_in_output` = False is not allowed."
)
"""The backend's text, as its CI checks it (the backend raises it inside its generation loop)."""


@dataclass(frozen=True, slots=True)
class StreamPolicy:
    """How a route or RPC decides between a stream and one response, before anything else."""

    default: bool
    refusal: str | None = None
    """The error for a client asking to stream where only one response can be sent."""


@dataclass(slots=True)
class TritonRequest:
    """A generate request in the backend's terms: the valid request for the core, and what
    its responses hold besides the outputs it names."""

    request: ValidRequest
    text_input: str
    prepend_input: bool
    """The prompt comes before the first response's text."""
    client_parameters: frozenset[str]
    """The sampling parameters the client set (the server may add to them)."""

    @property
    def logprobs_requested(self) -> bool:
        """The client set `logprobs` (else the `logprobs` output is the JSON text "null")."""
        return "logprobs" in self.client_parameters


def triton_request(
    inputs: TritonInputs,
    model: ServedModel,
    policy: StreamPolicy,
    limits: RequestLimits = DEFAULT_LIMITS,
) -> TritonRequest:
    """Read the inputs (checked against the server's limits as they were read) as the
    backend does; every invalid input is a 400 naming its field."""
    parameters = inputs.parameters
    stream = first_set(inputs.stream, parameters.pop("stream", None), policy.default)
    if stream and policy.refusal:
        raise InvalidRequestError(policy.refusal)
    lora_name = parameters.pop("lora_name", None)
    chat_template = first_set(
        parameters.pop("apply_chat_template", None), model.spec.flag(APPLY_CHAT_TEMPLATE)
    )
    if inputs.exclude_input_in_output is None:
        prepend_input = not stream
    else:
        prepend_input = not inputs.exclude_input_in_output
    if prepend_input and stream:
        raise InvalidRequestError(STREAM_WITH_INPUT_MESSAGE)
    client_parameters = frozenset(parameters)
    for output in OUTPUTS:
        if output.name in inputs.outputs:
            for key, value in output.sampling_defaults:
                parameters.setdefault(key, value)
    request = ValidRequest(
        request_id=uuid.uuid4().hex,
        prompt=inputs.text_input,
        sampling=parameters,
        stream=stream,
        chat_template=bool(chat_template),
        images=decode_images(inputs.images, model, limits.max_image_pixels),
        lora=resolve_lora(lora_name, model),
        outputs=inputs.outputs,
        parameters_field=PARAMETERS_FIELD,
        timeout_seconds=inputs.schedule.timeout_seconds,
        priority=inputs.schedule.priority,
    )
    return TritonRequest(request, inputs.text_input, prepend_input, client_parameters)


def first_set(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


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


def decode_images(
    images: list[str], model: ServedModel, max_pixels: int | None = None
) -> list[Any]:
    """Decode base64 images with Pillow into RGB images, as the backend does. A model that
    takes no images refuses them first (a model not ready yet is refused at admission); an
    image of more than `max_pixels` is refused from its header, before it is decoded."""
    if not images:
        return []
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
