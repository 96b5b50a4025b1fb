"""A `ModelInferRequest` as the backend reads it: its input tensors and request parameters
become the same `GenerateRequest` the HTTP frontend builds (its fields are the backend's
input names), so the Triton semantics live in app/triton only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2

from app.errors import InvalidRequestError
from app.grpc.tensors import OUTPUT_DATATYPES, decode_inputs
from app.schemas.generate import GenerateRequest
from app.schemas.validation import validate_data

EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"}
)
"""Request parameters Triton's core reads itself; they never reach the backend."""
BACKEND_PARAMETER_KINDS = frozenset({"bool_param", "int64_param", "string_param", "double_param"})
LIST_INPUTS = frozenset({"image"})
"""Inputs of any length; every other input holds one element."""


@dataclass(frozen=True, slots=True)
class InferOptions:
    """What the response must honour besides the backend's reading of the request."""

    empty_final_response: bool = False
    requested_outputs: frozenset[str] = frozenset()
    """Outputs the client named; empty means every output the backend produces."""


def read_request(request: service_pb2.ModelInferRequest) -> tuple[GenerateRequest, InferOptions]:
    """The request's `GenerateRequest` and options; a bad input or parameter is an
    `InvalidRequestError` naming it. Request parameters are the sampling parameters only
    when the `sampling_parameters` tensor is absent (as in the backend)."""
    parameters, empty_final = request_parameters(request)
    inputs = decode_inputs(request)
    body: dict[str, Any] = {
        name: elements if name in LIST_INPUTS else elements[0] for name, elements in inputs.items()
    }
    if "sampling_parameters" not in body and parameters:
        body["parameters"] = parameters
    options = InferOptions(
        empty_final_response=empty_final, requested_outputs=requested_outputs(request)
    )
    return validate_data(GenerateRequest, body), options


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
        elif key in RESERVED_PARAMETERS:
            continue
        elif kind not in BACKEND_PARAMETER_KINDS:
            raise InvalidRequestError(
                f"invalid value type for '{key}' parameter, "
                f"expected int64_param, bool_param, or string_param."
            )
        else:
            values[key] = getattr(parameter, kind)
    return values, empty_final


def requested_outputs(request: service_pb2.ModelInferRequest) -> frozenset[str]:
    names = frozenset(output.name for output in request.outputs)
    for name in names:
        if name not in OUTPUT_DATATYPES:
            raise InvalidRequestError(
                f"unexpected inference output '{name}' for model '{request.model_name}'"
            )
    return names
