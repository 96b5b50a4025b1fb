"""KServe v2 tensors of the backend's inputs and outputs: checked against the model's inputs
as Triton's core checks them, decoded from `raw_input_contents` (or typed `contents`), and
the outputs encoded into `raw_output_contents`."""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from app.errors import InvalidRequestError
from app.triton.tensors import INPUTS as TRITON_INPUTS
from app.triton.tensors import TritonInput

INPUTS = {tensor.name: tensor for tensor in TRITON_INPUTS}
REQUIRED_INPUTS = [tensor.name for tensor in TRITON_INPUTS if not tensor.optional]


def request_label(request: service_pb2.ModelInferRequest) -> str:
    """Triton core's prefix of request errors."""
    return f"[request id: {request.id or '<id_unknown>'}] "


def decode_inputs(request: service_pb2.ModelInferRequest) -> dict[str, list[Any]]:
    """Each input's elements (str for BYTES, bool for BOOL), checked as Triton's core does."""
    model = request.model_name
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidRequestError(
            f"{request_label(request)}expected {len(request.inputs)} raw input contents for model "
            f"'{model}' but got {len(raw)}"
        )
    values: dict[str, list[Any]] = {}
    for index, tensor in enumerate(request.inputs):
        spec = INPUTS.get(tensor.name)
        if spec is None:
            raise InvalidRequestError(
                f"unexpected inference input '{tensor.name}' for model '{model}'"
            )
        if tensor.name in values:
            raise InvalidRequestError(
                f"{request_label(request)}input '{tensor.name}' is given more than once"
            )
        check_tensor(request, tensor, spec)
        if raw and tensor.HasField("contents"):
            raise InvalidRequestError(
                f"contents field must not be specified when using raw_input_contents for "
                f"'{tensor.name}' for model '{model}'"
            )
        elements = decode_raw(spec, raw[index]) if raw else decode_contents(spec, tensor.contents)
        if len(elements) != math.prod(tensor.shape):
            raise InvalidRequestError(
                f"{request_label(request)}input '{tensor.name}' has {len(elements)} elements, "
                f"but its shape {list(tensor.shape)} holds {math.prod(tensor.shape)}"
            )
        values[tensor.name] = elements
    check_required(request, values)
    return values


def check_tensor(request: service_pb2.ModelInferRequest, tensor: Any, spec: TritonInput) -> None:
    """Data type and shape against the model's input (`-1` is any size)."""
    if tensor.datatype != spec.datatype:
        raise InvalidRequestError(
            f"{request_label(request)}inference input '{spec.name}' "
            f"data-type is '{tensor.datatype}', "
            f"but model '{request.model_name}' expects '{spec.datatype}'"
        )
    shape = tuple(tensor.shape)
    if (
        len(shape) != len(spec.dims)
        or any(d != e and e != -1 for d, e in zip(shape, spec.dims, strict=True))
        or min(shape, default=0) < 0
    ):
        raise InvalidRequestError(
            f"{request_label(request)}unexpected shape for input '{spec.name}' for model "
            f"'{request.model_name}'. Expected {list(spec.dims)}, got {list(shape)}. "
        )


def check_required(request: service_pb2.ModelInferRequest, values: dict[str, list[Any]]) -> None:
    missing = [name for name in REQUIRED_INPUTS if name not in values]
    if missing:
        raise InvalidRequestError(
            f"{request_label(request)}expected number of inputs between {len(REQUIRED_INPUTS)} and "
            f"{len(INPUTS)} but got {len(values)} inputs for model '{request.model_name}'. "
            f"Got input(s) "
            f"{list(values)}, but missing required input(s) {missing}. "
            f"Please provide all required input(s)."
        )


def decode_raw(spec: TritonInput, data: bytes) -> list[Any]:
    if spec.datatype == "BOOL":
        return [byte != 0 for byte in data]
    return [text(spec.name, element) for element in split_bytes(spec.name, data)]


def decode_contents(spec: TritonInput, contents: service_pb2.InferTensorContents) -> list[Any]:
    if spec.datatype == "BOOL":
        return list(contents.bool_contents)
    return [text(spec.name, element) for element in contents.bytes_contents]


def split_bytes(name: str, data: bytes) -> list[bytes]:
    """The elements of a BYTES tensor (each a little-endian uint32 length, then its bytes);
    a 400 naming the input where a length runs past the data."""
    try:
        return list(deserialize_bytes_tensor(data))
    except struct.error:
        raise InvalidRequestError(f"input '{name}': malformed BYTES tensor data") from None


def text(name: str, element: bytes) -> str:
    try:
        return element.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"input '{name}': not valid UTF-8 ({exc.reason})") from None


def encode_output(datatype: str, values: Sequence[Any] | Any) -> bytes:
    """An output's elements as `raw_output_contents` bytes. A missing per-completion value is
    the backend's `str(None)` for text and 0 for numbers."""
    if datatype == "BYTES":
        encoded = serialize_byte_tensor(np.array([str(value) for value in values], np.object_))
        return bytes(encoded.item()) if encoded.size else b""
    if not isinstance(values, (list, tuple)):
        values = [values]
    code = "f" if datatype == "FP32" else "I"
    return struct.pack(f"<{len(values)}{code}", *(v or 0 for v in values))
