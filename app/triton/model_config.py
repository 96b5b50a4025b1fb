"""Triton's view of a vLLM model: its config as Triton completes it (the backend's inputs and
outputs from app/triton/tensors.py), metadata and config JSON."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from app.repository.layout import ModelSpec
from app.triton.tensors import BYTES, INPUTS, OUTPUTS, TritonInput, TritonOutput

BACKEND = "vllm"
ENGINE_NOTE_PREFIX = "engine_"
"""Parameters naming the engine arguments the server chose for this host (e.g. engine_dtype)."""


def config_type(datatype: str) -> str:
    """KServe's BYTES is config.pbtxt's TYPE_STRING; FP32 is TYPE_FP32, ..."""
    return "TYPE_STRING" if datatype == BYTES else f"TYPE_{datatype}"


def add_missing(tensors: Any, table: tuple[TritonInput | TritonOutput, ...]) -> None:
    """The table's tensors that config.pbtxt does not list, added to `tensors` (its inputs
    or outputs)."""
    present = {tensor.name for tensor in tensors}
    for tensor in table:
        if tensor.name not in present:
            added = tensors.add(
                name=tensor.name,
                data_type=model_config_pb2.DataType.Value(config_type(tensor.datatype)),
                dims=tensor.dims,
            )
            if isinstance(tensor, TritonInput):
                added.optional = tensor.optional


def completed_config(spec: ModelSpec) -> Message:
    """config.pbtxt as Triton completes it for this backend (decoupled, no batching)."""
    config = model_config_pb2.ModelConfig()
    config.CopyFrom(spec.config)
    config.name = spec.name
    config.backend = config.backend or BACKEND
    config.max_batch_size = 0
    config.model_transaction_policy.decoupled = True
    add_missing(config.input, INPUTS)
    add_missing(config.output, OUTPUTS)
    if not config.instance_group:
        config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_MODEL)
    for name, note in spec.engine_notes.items():
        key = f"{ENGINE_NOTE_PREFIX}{name}"
        if key not in config.parameters:
            config.parameters[key].string_value = note
    return config


def config_json(spec: ModelSpec) -> dict[str, Any]:
    """The completed config as Triton's JSON (proto field names, numeric dims)."""
    data: dict[str, Any] = json_format.MessageToDict(
        completed_config(spec),
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=False,
    )
    data["max_batch_size"] = 0
    for tensor in (*data.get("input", ()), *data.get("output", ())):
        tensor["dims"] = [int(d) for d in tensor.get("dims", ())]
    return data


def metadata_json(name: str, versions: list[str], spec: ModelSpec) -> dict[str, Any]:
    """KServe v2 model metadata: name, versions, platform, typed inputs and outputs."""
    config = completed_config(spec)
    return {
        "name": name,
        "versions": versions,
        "platform": config.backend,
        "inputs": [tensor_metadata(t) for t in config.input],
        "outputs": [tensor_metadata(t) for t in config.output],
    }


def tensor_metadata(tensor: Message) -> dict[str, Any]:
    """KServe datatype names: TYPE_STRING is BYTES, TYPE_FP32 is FP32, ..."""
    data_type = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    return {
        "name": tensor.name,
        "datatype": "BYTES" if data_type == "STRING" else data_type,
        "shape": [int(d) for d in tensor.dims],
    }
