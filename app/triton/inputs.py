"""A request's inputs as the backend reads them, whichever wire carried them: the HTTP body's
fields (`body_inputs`) or gRPC's tensors (app/grpc/requests.py), and the request's
parameters, with Triton's mapping of a parameter that names an input; read and checked
against the server's limits once, for every Triton frontend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.limits import RequestLimits, check_count, check_sampling, unset_max_tokens
from app.errors import InvalidRequestError
from app.schemas.generate import ENGINE_MAX_TOKENS, GenerateRequest, SamplingParameters
from app.schemas.validation import json_object_text, validate_data
from app.triton.tensors import INPUT_NAMES, TEXT_OUTPUT, outputs_asked

PARAMETERS_FIELD = "parameters"
SCHEDULE_PARAMETERS = ("priority", "timeout")
"""Request parameters Triton's core reads itself (its schedule-policy extension)."""
SAMPLING_PARAMETERS = "sampling_parameters"
DEFAULT_LIMITS = RequestLimits()


@dataclass(frozen=True, slots=True)
class Schedule:
    """Triton's schedule-policy parameters (its core's, not the backend's): `priority` (0:
    the default) and `timeout` in microseconds (0: none)."""

    priority: int = 0
    timeout_us: int = 0

    @property
    def timeout_seconds(self) -> float | None:
        return self.timeout_us / 1_000_000 if self.timeout_us else None


@dataclass(slots=True)
class TritonInputs:
    """The backend's inputs of one request, types checked."""

    text_input: str
    parameters: dict[str, Any]
    """The sampling parameters (their schema's types checked), the backend's own among them."""
    images: list[str] = field(default_factory=list)
    stream: bool | None = None
    exclude_input_in_output: bool | None = None
    outputs: frozenset[str] = frozenset({TEXT_OUTPUT.name})
    """The outputs its responses hold (`text_output` and those a `return_*` input asks for)."""
    schedule: Schedule = field(default_factory=Schedule)
    """Triton's schedule-policy parameters of the request."""


def body_inputs(body: GenerateRequest, limits: RequestLimits = DEFAULT_LIMITS) -> TritonInputs:
    """The inputs of a `generate` body (the POST body, or the GET stream's query)."""
    by_input = {name: getattr(body, name) for name in INPUT_NAMES}
    return read_inputs(by_input, body.parameters, limits, dict(body.model_extra or {}))


def read_inputs(
    by_input: dict[str, Any],
    parameters: SamplingParameters | dict[str, Any] | None,
    limits: RequestLimits = DEFAULT_LIMITS,
    extra: dict[str, Any] | None = None,
    requested: frozenset[str] = frozenset(),
    schedule: Schedule | None = None,
) -> TritonInputs:
    """The inputs from their values `by_input` name (None: absent), the request's
    `parameters` (as read by their schema, or as sent) and any `extra` parameters (Triton
    takes unknown top-level keys as such): their types checked, then the server's `limits`,
    before any work whose size the request chooses (a request that sets no `max_tokens`
    asks vLLM's default within the limit); with `requested` outputs, the others
    are left out. The schedule-policy parameters are `schedule` (gRPC reads them from the
    request's parameters) or else taken from `parameters`."""
    lifted, parameters = lift_inputs(by_input, parameters)
    by_input = {**by_input, **lifted}
    images = images_of(by_input.get("image"))
    outputs = outputs_asked(by_input)
    if lifted:
        checked = validate_data(GenerateRequest, by_input, PARAMETERS_FIELD)
        by_input.update((key, getattr(checked, key)) for key in lifted)
    sampling_text = by_input.get(SAMPLING_PARAMETERS)
    if sampling_text is not None:
        raw = json_object_text(sampling_text, SAMPLING_PARAMETERS)
        sampling = validate_data(SamplingParameters, raw, SAMPLING_PARAMETERS).model_dump(
            exclude_none=True
        )
    else:
        sampling = validate_data(SamplingParameters, extra or {}).model_dump(exclude_none=True)
        if isinstance(parameters, dict):
            parameters = validate_data(SamplingParameters, parameters, PARAMETERS_FIELD)
        if parameters is not None:
            sampling.update(parameters.model_dump(exclude_none=True))
    in_parameters = schedule_of(sampling)
    check_sampling(sampling, limits, PARAMETERS_FIELD)
    if limits.max_tokens is not None and sampling.get("max_tokens") is None:
        sampling["max_tokens"] = unset_max_tokens(ENGINE_MAX_TOKENS, limits.max_tokens)
    check_count("image", len(images), limits.max_images)
    return TritonInputs(
        text_input=by_input["text_input"],
        parameters=sampling,
        images=images,
        stream=by_input.get("stream"),
        exclude_input_in_output=by_input.get("exclude_input_in_output"),
        outputs=outputs & requested if requested else outputs,
        schedule=in_parameters if schedule is None else schedule,
    )


def schedule_of(sampling: dict[str, Any]) -> Schedule:
    """Take Triton's schedule-policy parameters (their types checked by the schema) out of the
    sampling parameters: they are the request's, not the engine's sampling."""
    priority, timeout = (sampling.pop(name, None) for name in SCHEDULE_PARAMETERS)
    return Schedule(priority or 0, timeout or 0)


def lift_inputs(
    by_input: dict[str, Any], parameters: SamplingParameters | dict[str, Any] | None
) -> tuple[dict[str, Any], SamplingParameters | dict[str, Any] | None]:
    """Triton's mapping of the generate extension: a key inside `parameters` that names a
    model input (`exclude_input_in_output`, `return_logprobs`, ...) is that input, not a
    sampling parameter (`stream` stays where the schema reads it: both places mean the
    same). Returns those inputs, as sent, and the parameters without them."""
    if parameters is None:
        return {}, None
    sent = parameters if isinstance(parameters, dict) else parameters.model_extra or {}
    lifted = {
        key: value
        for key, value in sent.items()
        if key in INPUT_NAMES and key not in SamplingParameters.model_fields
    }
    if not lifted:
        return {}, parameters
    for key in lifted:
        if key == "text_input" or by_input.get(key) is not None:
            raise InvalidRequestError(f"{PARAMETERS_FIELD}.{key}: also given as the input '{key}'")
    if isinstance(parameters, dict):
        return lifted, {k: v for k, v in parameters.items() if k not in lifted}
    kept = parameters.model_copy()
    kept.__pydantic_extra__ = {k: v for k, v in sent.items() if k not in lifted}
    return lifted, kept


def images_of(image: list[str] | str | None) -> list[str]:
    """The `image` input's elements: one image or a list of them."""
    if not image:
        return []
    return [image] if isinstance(image, str) else list(image)
