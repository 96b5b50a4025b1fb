"""ModelStreamInfer over a real grpc.aio server with the engine double, driven by tritonclient's
sync and asyncio clients as the backend's samples and CI tests drive Triton."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio
from tritonclient.grpc import service_pb2

from tests.doubles import FakeEngine
from tests.support.triton_grpc import (
    GrpcApp,
    aio_stream_results,
    bool_input,
    by_id,
    bytes_input,
    is_final,
    serve_grpc_app,
    stream_results,
    text_of,
    vllm_request,
)
from tests.support.waiting import wait_until

STRING_PARAMETERS = {"temperature": "0", "top_p": "1", "max_tokens": "4"}


@pytest.fixture
def served(repository: Path, engine: FakeEngine) -> Iterator[GrpcApp]:
    with serve_grpc_app(repository, lambda spec: engine) as app:
        yield app


@pytest.fixture
def client(served: GrpcApp) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(served.grpc_url) as grpc_client:
        yield grpc_client


def test_requests_multiplexed_on_one_stream_echo_their_ids(client: triton_grpc.InferenceServerClient) -> None:
    requests = [
        vllm_request("Hello, my name is", "0", sampling_parameters=STRING_PARAMETERS),
        vllm_request("The capital of France is", "1", stream=True, sampling_parameters=STRING_PARAMETERS,
                     exclude_input_in_output=True),
        vllm_request("The future of AI is", "2", sampling_parameters=STRING_PARAMETERS, exclude_input_in_output=True),
    ]
    results = by_id(stream_results(client, requests))
    assert [len(results[i]) for i in ("0", "1", "2")] == [1, 4, 1]
    assert text_of(results["0"]) == "Hello, my name isHello from the fake"
    assert text_of(results["1"]) == text_of(results["2"]) == "Hello from the fake"
    assert [is_final(r) for r in results["1"]] == [False, False, False, True] and is_final(results["0"][0])
    response = results["0"][0].get_response()
    assert (response.model_name, response.model_version) == ("fake", "1")
    assert results["0"][0].as_numpy("text_output").shape == (1,)


def test_string_sampling_values_reach_the_engine_typed(client: triton_grpc.InferenceServerClient, engine: FakeEngine) -> None:
    sampling = {"temperature": "0.1", "top_p": "0.95", "max_tokens": "3", "ignore_eos": "true", "seed": "7"}
    [(_, error)] = stream_results(client, [vllm_request("x", "a", sampling_parameters=sampling)])
    assert error is None
    params = engine.requests[-1].sampling_params
    assert (params.temperature, params.top_p, params.max_tokens, params.ignore_eos, params.seed) == (0.1, 0.95, 3, True, 7)


def test_request_parameters_are_used_only_without_the_tensor(
    client: triton_grpc.InferenceServerClient, engine: FakeEngine
) -> None:
    as_parameters = vllm_request("x", "p", sampling_parameters={"max_tokens": 2, "temperature": 0.5, "ignore_eos": True},
                                 send_parameters_as_tensor=False)
    tensor = vllm_request("x", "t", sampling_parameters={"max_tokens": "5"})
    tensor["parameters"] = {"not_a_sampling_parameter": "ignored, as the backend ignores it"}
    results = by_id(stream_results(client, [as_parameters]) + stream_results(client, [tensor]))
    first, second = engine.requests[-2:]
    assert (first.sampling_params.max_tokens, first.sampling_params.temperature) == (2, 0.5)
    assert first.sampling_params.ignore_eos and second.sampling_params.max_tokens == 5
    assert set(results) == {"p", "t"}


def test_additional_outputs_have_the_backend_types_and_shapes(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request(
        "one two three", "x", stream=True, exclude_input_in_output=True, outputs=None,
        sampling_parameters={"max_tokens": "3", "logprobs": "1"},
        return_finish_reason=True, return_cumulative_logprob=True, return_logprobs=True,
        return_num_input_tokens=True, return_num_output_tokens=True,
    )
    results = by_id(stream_results(client, [request]))["x"]
    assert len(results) == 3
    outputs = {o.name: (o.datatype, list(o.shape)) for o in results[0].get_response().outputs}
    assert outputs == {
        "text_output": ("BYTES", [1]), "finish_reason": ("BYTES", [1]), "cumulative_logprob": ("FP32", [1]),
        "logprobs": ("BYTES", [1]), "num_input_tokens": ("UINT32", []), "num_output_tokens": ("UINT32", [1]),
    }
    assert [r.as_numpy("finish_reason")[0] for r in results] == [b"None", b"None", b"length"]
    assert [float(r.as_numpy("cumulative_logprob")[0]) for r in results] == [-0.5, -1.0, -1.5]
    assert results[0].as_numpy("cumulative_logprob").dtype == np.float32
    assert results[0].as_numpy("num_input_tokens").dtype == np.uint32 and int(results[0].as_numpy("num_input_tokens")) == 3
    assert [int(r.as_numpy("num_output_tokens")[0]) for r in results] == [1, 1, 1]
    [position] = json.loads(results[1].as_numpy("logprobs")[0])
    assert position == {"101": {"logprob": -0.5, "rank": 1, "decoded_token": " from"}}


def test_no_logprobs_parameter_gives_the_json_null(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request("x", "n", sampling_parameters={"max_tokens": "1"}, outputs=None, return_logprobs=True)
    [result] = by_id(stream_results(client, [request]))["n"]
    assert result.as_numpy("logprobs")[0] == b"null" and result.as_numpy("finish_reason") is None


def test_outputs_are_pruned_to_those_requested(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request("x", "r", sampling_parameters={"max_tokens": "2"}, outputs=["finish_reason"],
                           return_finish_reason=True, return_num_output_tokens=True)
    [result] = by_id(stream_results(client, [request]))["r"]
    assert [o.name for o in result.get_response().outputs] == ["finish_reason"]
    assert len(result.get_response().raw_output_contents) == 1


def test_n_completions_are_tensors_of_n_elements(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request("x", "n2", sampling_parameters={"max_tokens": "2", "n": "2"}, exclude_input_in_output=True,
                           outputs=None, return_num_output_tokens=True)
    [result] = by_id(stream_results(client, [request]))["n2"]
    assert list(result.as_numpy("text_output")) == [b"Hello from", b" from the"]
    assert list(result.as_numpy("num_output_tokens")) == [2, 2]


def test_empty_final_response_when_the_client_asks(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request("x", "e", stream=True, exclude_input_in_output=True, sampling_parameters={"max_tokens": "2"})
    request["enable_empty_final_response"] = True
    results = by_id(stream_results(client, [request]))["e"]
    assert [is_final(r) for r in results] == [False, False, True]
    assert text_of(results[:2]) == "Hello from" and results[2].get_response().outputs == []
    assert results[2].get_response().id == "e"


BAD_REQUESTS = [
    ({"stream": True, "exclude_input_in_output": False},
     "Error generating stream: When streaming, `exclude_input_in_output` = False is not allowed."),
    ({"model_name": "nope"}, "Request for unknown model: 'nope' is not found"),
    ({"sampling_parameters": {"max_tokens": "lots"}}, "parameters.max_tokens: Input should be a valid integer"),
    ({"sampling_parameters": {"temprature": "0"}}, "parameters.temprature: unknown sampling parameter"),
    ({"sampling_parameters": {"lora_name": "doc"}}, "LoRA feature is not enabled."),
    ({"outputs": ["text"]}, "unexpected inference output 'text' for model 'fake'"),
]


@pytest.mark.parametrize(("changes", "message"), BAD_REQUESTS)
def test_a_bad_request_gets_its_error_and_the_stream_goes_on(
    client: triton_grpc.InferenceServerClient, changes: dict, message: str
) -> None:
    bad = vllm_request("x", "bad", **changes)
    good = vllm_request("x", "good", sampling_parameters={"max_tokens": "2"}, exclude_input_in_output=True)
    results = stream_results(client, [bad, good])
    errors = [error for _, error in results if error is not None]
    assert len(errors) == 1 and message in errors[0].message()
    assert text_of(by_id([r for r in results if r[1] is None])["good"]) == "Hello from"


def raw_request(request_id: str, **tensors: tuple[str, list[int], bytes]) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="fake", id=request_id)
    for name, (datatype, shape, data) in tensors.items():
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(data)
    return request


TEXT = ("BYTES", [1], b"\x01\x00\x00\x00x")
BAD_TENSORS = [
    ({"text_input": TEXT, "foo": ("BOOL", [1], b"\x01")}, "unexpected inference input 'foo' for model 'fake'"),
    ({"text_input": TEXT, "stream": ("BYTES", [1], b"\x01\x00\x00\x00x")},
     "[request id: t] inference input 'stream' data-type is 'BYTES', but model 'fake' expects 'BOOL'"),
    ({"text_input": ("BYTES", [2], b"\x01\x00\x00\x00x\x01\x00\x00\x00y")},
     "[request id: t] unexpected shape for input 'text_input' for model 'fake'. Expected [1], got [2]. "),
    ({"stream": ("BOOL", [1], b"\x00")},
     ("[request id: t] expected number of inputs between 1 and 10 but got 1 inputs for model 'fake'. Got input(s) "
      "['stream'], but missing required input(s) ['text_input']. Please provide all required input(s).")),
    ({"text_input": ("BYTES", [1], b"\x09\x00\x00\x00x")}, "input 'text_input': malformed BYTES tensor data"),
    ({"text_input": ("BYTES", [1], b"\x01\x00\x00\x00\xff")}, "input 'text_input': not valid UTF-8"),
    ({"text_input": TEXT, "sampling_parameters": ("BYTES", [1], b"\x03\x00\x00\x00{x}")},
     "sampling_parameters: invalid JSON"),
]


@pytest.mark.parametrize(("tensors", "message"), BAD_TENSORS)
async def test_bad_tensors_get_triton_core_errors_per_request(served: GrpcApp, tensors: dict, message: str) -> None:
    import grpc.aio
    from tritonclient.grpc import service_pb2_grpc

    good = raw_request("ok", text_input=TEXT, exclude_input_in_output=("BOOL", [1], b"\x01"))
    async with grpc.aio.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        responses = [r async for r in stub.ModelStreamInfer(iter([raw_request("t", **tensors), good]))]
    [error] = [r for r in responses if r.error_message]
    assert error.error_message.startswith(message), error.error_message
    assert error.infer_response.id == "t" and error.infer_response.parameters["triton_final_response"].bool_param
    assert [r.infer_response.id for r in responses if not r.error_message] == ["ok"]


def test_typed_contents_are_read_like_raw_contents(served: GrpcApp, engine: FakeEngine) -> None:
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name="fake", id="typed")
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"typed prompt")
    request.inputs.add(name="stream", datatype="BOOL", shape=[1]).contents.bool_contents.append(False)
    request.parameters["max_tokens"].int64_param = 2
    with grpc.insecure_channel(served.grpc_url) as channel:
        [response] = list(service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([request])))
    assert response.error_message == "" and response.infer_response.id == "typed"
    assert response.infer_response.raw_output_contents[0][4:] == b"typed promptHello from"


async def test_asyncio_client_like_the_backend_sample(served: GrpcApp) -> None:
    prompts = ["Hello, my name is\n", "The most dangerous animal is\n"]
    requests = [vllm_request(p, str(i), stream=True, exclude_input_in_output=True,
                             sampling_parameters={"temperature": "0.1", "top_p": "0.95", "max_tokens": "3"})
                for i, p in enumerate(prompts)]
    async with triton_grpc_aio.InferenceServerClient(url=served.grpc_url) as client:
        results = by_id(await aio_stream_results(client, requests))
    assert {i: text_of(r) for i, r in results.items()} == {"0": "Hello from the", "1": "Hello from the"}


def test_reserved_parameters_follow_triton(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request("x", "s", sampling_parameters={"max_tokens": "1"}, exclude_input_in_output=True)
    request.update(priority=3, sequence_id=5, sequence_start=True, timeout=1000)
    assert text_of(by_id(stream_results(client, [request]))["s"]) == "Hello"


def test_bool_inputs_from_several_tensors(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request("x", "b", sampling_parameters={"max_tokens": "1"})
    request["inputs"] = [bytes_input("text_input", ["x"]), bool_input("exclude_input_in_output", True)]
    assert text_of(by_id(stream_results(client, [request]))["b"]) == "Hello"


def test_cancelling_the_stream_aborts_every_engine_request(repository: Path) -> None:
    engine = FakeEngine(step_delay=0.05)
    with serve_grpc_app(repository, lambda spec: engine) as app, triton_grpc.InferenceServerClient(app.grpc_url) as client:
        client.start_stream(lambda result, error: None)
        for index in range(5):
            client.async_stream_infer(**vllm_request("x", str(index), stream=True, exclude_input_in_output=True,
                                                     sampling_parameters={"max_tokens": "200"}))
        wait_until(lambda: len(engine.active) == 5)
        client.stop_stream(cancel_requests=True)
        wait_until(lambda: not engine.active)
        assert len(engine.aborted) == 5
        assert not any(model.in_flight for model in app.runtime.registry)
