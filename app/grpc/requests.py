"""A `ModelInferRequest` off the wire: its input tensors decoded and its parameters sorted out
as Triton's core does; the backend's reading of them is app/triton's, as it is of the HTTP
body's fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import service_pb2

from app.core.limits import check_name
from app.errors import InvalidRequestError
from app.grpc.tensors import INPUTS, decode_inputs
from app.triton.inputs import SAMPLING_PARAMETERS, Schedule
from app.triton.tensors import OUTPUT_NAMES

ID_FIELD = "id"
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
SEQUENCE_PARAMETERS = frozenset({"sequence_id", "sequence_start", "sequence_end"})
"""Request parameters of Triton's sequence batcher (which a decoupled model has none of):
accepted and dropped, as Triton's core takes them and never passes them to the backend."""
BACKEND_PARAMETER_KINDS = frozenset({"bool_param", "int64_param", "string_param", "double_param"})
LIST_INPUTS = frozenset(name for name, tensor in INPUTS.items() if tensor.dims == (-1,))
"""Inputs of any length; every other input holds one element."""


@dataclass(frozen=True, slots=True)
class GrpcRequest:
    """A `ModelInferRequest` off the wire: what the backend reads, and what the response must
    honour besides."""

    inputs: dict[str, Any]
    """Each input's value by name (a list for `image`, else its one element)."""
    parameters: dict[str, Any] | None
    """The request's parameters where they are the sampling parameters: without the
    `sampling_parameters` tensor (as in the backend)."""
    requested_outputs: frozenset[str] = frozenset()
    """The outputs the client named (none: every output it asked for)."""
    empty_final_response: bool = False
    schedule: Schedule = field(default_factory=Schedule)
    """The `priority` and `timeout` parameters, which Triton's core reads itself."""


def read_request(request: service_pb2.ModelInferRequest) -> GrpcRequest:
    """The request's inputs and parameters; a bad tensor or parameter, or an unknown output,
    is an `InvalidRequestError` naming it, and so is an id too long to repeat in every
    response."""
    check_name(ID_FIELD, request.id, "an id")
    parameters, empty_final = request_parameters(request)
    schedule = schedule_of(request)
    tensors = decode_inputs(request)
    inputs: dict[str, Any] = {
        name: elements if name in LIST_INPUTS else elements[0] for name, elements in tensors.items()
    }
    return GrpcRequest(
        inputs,
        None if SAMPLING_PARAMETERS in inputs or not parameters else parameters,
        requested_outputs(request),
        empty_final,
        schedule,
    )


def request_parameters(request: service_pb2.ModelInferRequest) -> tuple[dict[str, Any], bool]:
    """The parameters the backend would see, and whether an empty final response is wanted."""
    values: dict[str, Any] = {}
    empty_final = False
    for key, parameter in request.parameters.items():
        kind = parameter.WhichOneof("parameter_choice")
        if key == EMPTY_FINAL_RESPONSE:
            if kind != "bool_param":
                raise InvalidRequestError(
                    f"invalid value type for '{EMPTY_FINAL_RESPONSE}' parameter, "
                    f"expected bool_param."
                )
            empty_final = parameter.bool_param
        elif key.startswith("triton_"):
            raise InvalidRequestError(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
                f"following keys starting with 'triton_' are allowed: {EMPTY_FINAL_RESPONSE}"
            )
        elif key in SEQUENCE_PARAMETERS or key in SCHEDULE_KINDS:
            continue
        elif kind not in BACKEND_PARAMETER_KINDS:
            raise InvalidRequestError(
                f"invalid value type for '{key}' parameter, "
                f"expected int64_param, bool_param, or string_param."
            )
        else:
            values[key] = getattr(parameter, kind)
    return values, empty_final


SCHEDULE_KINDS = {
    "priority": ("int64_param", "uint64_param"),
    "timeout": ("int64_param",),
}
"""Triton's schedule-policy parameters and the kinds of value its core takes for each."""


def schedule_of(request: service_pb2.ModelInferRequest) -> Schedule:
    """The request's `priority` and `timeout` parameters, checked as Triton's core does."""
    values: dict[str, int] = {}
    for name, kinds in SCHEDULE_KINDS.items():
        if name not in request.parameters:
            continue
        parameter = request.parameters[name]
        kind = parameter.WhichOneof("parameter_choice")
        if kind not in kinds:
            expected = " or ".join(kinds)
            raise InvalidRequestError(
                f"invalid value type for '{name}' parameter, expected {expected}."
            )
        values[name] = getattr(parameter, kind)
    if values.get("priority", 0) < 0:
        raise InvalidRequestError("invalid value for 'priority', expected value >= 0.")
    return Schedule(values.get("priority", 0), max(values.get("timeout", 0), 0))


def requested_outputs(request: service_pb2.ModelInferRequest) -> frozenset[str]:
    names = frozenset(output.name for output in request.outputs)
    for name in names:
        if name not in OUTPUT_NAMES:
            raise InvalidRequestError(
                f"unexpected inference output '{name}' for model '{request.model_name}'"
            )
    return names
