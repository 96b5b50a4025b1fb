"""`RepositoryModelLoad` read in two steps: its override entries are counted on the wire
first (stopping past the limit), and only a request within the limit is parsed. Parsing a
message of 150,000 map entries takes the event loop most of a second."""

from __future__ import annotations

from typing import Any

import grpc
from tritonclient.grpc import service_pb2

LOAD_METHOD = "/inference.GRPCInferenceService/RepositoryModelLoad"
PARAMETERS_FIELD = service_pb2.RepositoryModelLoadRequest.DESCRIPTOR.fields_by_name[
    "parameters"
].number
SKIPPED_BYTES = {1: 8, 5: 4}
"""Fixed-size wire types: 64-bit and 32-bit."""


def varint(data: bytes, index: int) -> tuple[int, int]:
    """The varint at `index` and the index after it."""
    value = shift = 0
    while True:
        if index >= len(data):
            raise ValueError("truncated varint")
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, index
        shift += 7


def count_entries(data: bytes, field: int, stop_after: int) -> int:
    """How many times top-level `field` occurs in the serialized message, counting no
    further than `stop_after + 1`; a malformed message counts what was read (the parser
    then says what is wrong)."""
    count = index = 0
    try:
        while index < len(data) and count <= stop_after:
            key, index = varint(data, index)
            number, wire_type = key >> 3, key & 7
            if wire_type == 2:
                length, index = varint(data, index)
                index += length
            elif wire_type == 0:
                _, index = varint(data, index)
            elif wire_type in SKIPPED_BYTES:
                index += SKIPPED_BYTES[wire_type]
            else:
                break
            count += number == field
    except ValueError:
        pass
    return count


def bounded_load_handler(handler: grpc.RpcMethodHandler, max_files: int) -> grpc.RpcMethodHandler:
    """`RepositoryModelLoad`'s handler taking the serialized request: with more parameters
    than `max_files` files and the config, the call is INVALID_ARGUMENT before the message is
    parsed."""

    async def load(data: bytes, context: grpc.aio.ServicerContext) -> Any:
        if count_entries(data, PARAMETERS_FIELD, max_files + 1) > max_files + 1:
            message = (
                f"load parameters: more than {max_files} 'file:' "
                f"overrides, above this server's limit"
            )
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        return await handler.unary_unary(handler.request_deserializer(data), context)

    return grpc.unary_unary_rpc_method_handler(
        load, response_serializer=handler.response_serializer
    )
