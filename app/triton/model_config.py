"""Triton's view of a vLLM model: the backend's inputs and outputs, metadata and config JSON."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from app.repository.layout import ModelSpec

BACKEND = "vllm"
ENGINE_NOTE_PREFIX = "engine_"
"""Parameters naming the engine arguments the server chose for this host (e.g. engine_dtype)."""
STRING, BOOL = "TYPE_STRING", "TYPE_BOOL"

BACKEND_INPUTS: tuple[tuple[str, str, list[int], bool], ...] = (
    ("text_input", STRING, [1], False),
    ("image", STRING, [-1], True),
    ("stream", BOOL, [1], True),
    ("sampling_parameters", STRING, [1], True),
    ("exclude_input_in_output", BOOL, [1], True),
    ("return_finish_reason", BOOL, [1], True),
    ("return_cumulative_logprob", BOOL, [1], True),
    ("return_logprobs", BOOL, [1], True),
    ("return_num_input_tokens", BOOL, [1], True),
    ("return_num_output_tokens", BOOL, [1], True),
)
"""(name, data type, dims, optional) of every input the backend's auto-complete adds."""

BACKEND_OUTPUTS: tuple[tuple[str, str, list[int]], ...] = (
    ("text_output", STRING, [-1]),
    ("finish_reason", STRING, [-1]),
    ("cumulative_logprob", "TYPE_FP32", [-1]),
    ("logprobs", STRING, [-1]),
    ("num_input_tokens", "TYPE_UINT32", [1]),
    ("num_output_tokens", "TYPE_UINT32", [-1]),
)


def completed_config(spec: ModelSpec) -> Message:
    """config.pbtxt as Triton completes it for this backend (decoupled, no batching)."""
    config = model_config_pb2.ModelConfig()
    config.CopyFrom(spec.config)
    config.name = spec.name
    config.backend = config.backend or BACKEND
    config.max_batch_size = 0
    config.model_transaction_policy.decoupled = True
    present_inputs = {tensor.name for tensor in config.input}
    for name, data_type, dims, optional in BACKEND_INPUTS:
        if name not in present_inputs:
            config.input.add(
                name=name,
                data_type=model_config_pb2.DataType.Value(data_type),
                dims=dims,
                optional=optional,
            )
    present_outputs = {tensor.name for tensor in config.output}
    for name, data_type, dims in BACKEND_OUTPUTS:
        if name not in present_outputs:
            config.output.add(
                name=name, data_type=model_config_pb2.DataType.Value(data_type), dims=dims
            )
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
