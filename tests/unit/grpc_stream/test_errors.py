"""ModelStreamInfer's errors over a real grpc.aio server with the engine double: a bad request
or bad tensor gets Triton's error for that request alone, and the stream goes on."""

from __future__ import annotations

from typing import Any

import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.grpc import service_pb2

from app.core.limits import MAX_NAME_LENGTH
from tests.doubles import FakeEngine
from tests.support.triton_grpc import (
    GrpcApp,
    by_id,
    stream_results,
    text_of,
    vllm_request,
)

BAD_REQUESTS = [
    (
        {"stream": True, "exclude_input_in_output": False},
        "Error generating stream: When streaming, "
        "`exclude_input_in_output` = False is not allowed.",
    ),
    ({"model_name": "nope"}, "Request for unknown model: 'nope' is not found"),
    (
        {"sampling_parameters": {"max_tokens": "lots"}},
        "parameters.max_tokens: Input should be a valid integer",
    ),
    (
        {"sampling_parameters": {"temprature": "0"}},
        "parameters.temprature: unknown sampling parameter",
    ),
    ({"sampling_parameters": {"lora_name": "doc"}}, "LoRA feature is not enabled."),
    ({"outputs": ["text"]}, "unexpected inference output 'text' for model 'fake'"),
]


@pytest.mark.parametrize(("changes", "message"), BAD_REQUESTS)
def test_a_bad_request_gets_its_error_and_the_stream_goes_on(
    client: triton_grpc.InferenceServerClient, changes: dict[str, Any], message: str
) -> None:
    bad = vllm_request("x", "bad", **changes)
    good = vllm_request(
        "x", "good", sampling_parameters={"max_tokens": "2"}, exclude_input_in_output=True
    )
    results = stream_results(client, [bad, good])
    errors = [error for _, error in results if error is not None]
    assert len(errors) == 1 and message in errors[0].message()
    assert text_of(by_id([r for r in results if r[1] is None])["good"]) == "Hello from"


def raw_request(
    request_id: str, **tensors: tuple[str, list[int], bytes]
) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="fake", id=request_id)
    for name, (datatype, shape, data) in tensors.items():
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(data)
    return request


TEXT = ("BYTES", [1], b"\x01\x00\x00\x00x")
BAD_TENSORS = [
    (
        {"text_input": TEXT, "foo": ("BOOL", [1], b"\x01")},
        "unexpected inference input 'foo' for model 'fake'",
    ),
    (
        {"text_input": TEXT, "stream": ("BYTES", [1], b"\x01\x00\x00\x00x")},
        "[request id: t] inference input 'stream' data-type is 'BYTES', "
        "but model 'fake' expects 'BOOL'",
    ),
    (
        {"text_input": ("BYTES", [2], b"\x01\x00\x00\x00x\x01\x00\x00\x00y")},
        "[request id: t] unexpected shape for input 'text_input' for model 'fake'. "
        "Expected [1], got [2]. ",
    ),
    (
        {"stream": ("BOOL", [1], b"\x00")},
        (
            "[request id: t] expected number of inputs between 1 and 10 but got 1 inputs "
            "for model 'fake'. Got input(s) "
            "['stream'], but missing required input(s) ['text_input']. "
            "Please provide all required input(s)."
        ),
    ),
    (
        {"text_input": ("BYTES", [1], b"\x09\x00\x00\x00x")},
        "input 'text_input': malformed BYTES tensor data",
    ),
    (
        {"text_input": ("BYTES", [1], b"\x01\x00\x00\x00x\x01\x00")},  # a cut length
        "input 'text_input': malformed BYTES tensor data",
    ),
    (
        {"text_input": ("BYTES", [1], b"\xff\xff\xff\xffx")},  # 4 GiB announced
        "input 'text_input': malformed BYTES tensor data",
    ),
    (
        {"text_input": ("BYTES", [1], b"\x01\x00\x00\x00\xff")},
        "input 'text_input': not valid UTF-8",
    ),
    (
        {"text_input": TEXT, "sampling_parameters": ("BYTES", [1], b"\x03\x00\x00\x00{x}")},
        "sampling_parameters: invalid JSON",
    ),
]


@pytest.mark.parametrize(("tensors", "message"), BAD_TENSORS)
async def test_bad_tensors_get_triton_core_errors_per_request(
    served: GrpcApp, tensors: dict[str, Any], message: str
) -> None:
    import grpc.aio
    from tritonclient.grpc import service_pb2_grpc

    good = raw_request("ok", text_input=TEXT, exclude_input_in_output=("BOOL", [1], b"\x01"))
    async with grpc.aio.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        responses = [
            r async for r in stub.ModelStreamInfer(iter([raw_request("t", **tensors), good]))
        ]
    [error] = [r for r in responses if r.error_message]
    assert error.error_message.startswith(message), error.error_message
    assert (
        error.infer_response.id == "t"
        and error.infer_response.parameters["triton_final_response"].bool_param
    )
    assert [r.infer_response.id for r in responses if not r.error_message] == ["ok"]


async def test_an_id_too_long_to_repeat_is_refused_naming_it_and_not_echoed(
    served: GrpcApp, engine: FakeEngine
) -> None:
    """Triton repeats a request's id in every response of its stream: an id of megabytes
    would be copied into each token's response. One longer than a name is refused before
    the engine is asked, and its error response does not repeat it; the longest allowed id
    is served and echoed."""
    import grpc.aio
    from tritonclient.grpc import service_pb2_grpc

    too_long, longest = "i" * (MAX_NAME_LENGTH + 1), "j" * MAX_NAME_LENGTH
    stream = ("BOOL", [1], b"\x01")
    requests = [raw_request(too_long, text_input=TEXT, stream=stream)]
    requests.append(raw_request(longest, text_input=TEXT, stream=stream))
    async with grpc.aio.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        responses = [r async for r in stub.ModelStreamInfer(iter(requests))]
    [error] = [r for r in responses if r.error_message]
    assert error.error_message == (
        f"id: an id of {MAX_NAME_LENGTH + 1} characters is longer than {MAX_NAME_LENGTH}"
    )
    assert error.infer_response.id == ""
    served_ids = {r.infer_response.id for r in responses if not r.error_message}
    assert served_ids == {longest}
    assert len(engine.requests) == 1
