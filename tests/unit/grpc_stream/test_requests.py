"""ModelStreamInfer's requests over a real grpc.aio server with the engine double, sent by
tritonclient's sync and asyncio clients as the backend's samples and CI tests send them to
Triton: requests multiplexed on one stream, sampling parameters as the tensor or as request
parameters, typed and raw contents, reserved parameters."""

from __future__ import annotations

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
    stream_results,
    text_of,
    vllm_request,
)

STRING_PARAMETERS = {"temperature": "0", "top_p": "1", "max_tokens": "4"}


def test_requests_multiplexed_on_one_stream_echo_their_ids(
    client: triton_grpc.InferenceServerClient,
) -> None:
    requests = [
        vllm_request("Hello, my name is", "0", sampling_parameters=STRING_PARAMETERS),
        vllm_request(
            "The capital of France is",
            "1",
            stream=True,
            sampling_parameters=STRING_PARAMETERS,
            exclude_input_in_output=True,
        ),
        vllm_request(
            "The future of AI is",
            "2",
            sampling_parameters=STRING_PARAMETERS,
            exclude_input_in_output=True,
        ),
    ]
    results = by_id(stream_results(client, requests))
    assert [len(results[i]) for i in ("0", "1", "2")] == [1, 4, 1]
    assert text_of(results["0"]) == "Hello, my name isHello from the fake"
    assert text_of(results["1"]) == text_of(results["2"]) == "Hello from the fake"
    assert [is_final(r) for r in results["1"]] == [False, False, False, True] and is_final(
        results["0"][0]
    )
    response = results["0"][0].get_response()
    assert (response.model_name, response.model_version) == ("fake", "1")
    assert results["0"][0].as_numpy("text_output").shape == (1,)


def test_string_sampling_values_reach_the_engine_typed(
    client: triton_grpc.InferenceServerClient, engine: FakeEngine
) -> None:
    sampling = {
        "temperature": "0.1",
        "top_p": "0.95",
        "max_tokens": "3",
        "ignore_eos": "true",
        "seed": "7",
    }
    [(_, error)] = stream_results(client, [vllm_request("x", "a", sampling_parameters=sampling)])
    assert error is None
    params = engine.requests[-1].sampling_params
    assert (
        params.temperature,
        params.top_p,
        params.max_tokens,
        params.ignore_eos,
        params.seed,
    ) == (0.1, 0.95, 3, True, 7)


def test_request_parameters_are_used_only_without_the_tensor(
    client: triton_grpc.InferenceServerClient, engine: FakeEngine
) -> None:
    as_parameters = vllm_request(
        "x",
        "p",
        sampling_parameters={"max_tokens": 2, "temperature": 0.5, "ignore_eos": True},
        send_parameters_as_tensor=False,
    )
    tensor = vllm_request("x", "t", sampling_parameters={"max_tokens": "5"})
    tensor["parameters"] = {"not_a_sampling_parameter": "ignored, as the backend ignores it"}
    results = by_id(stream_results(client, [as_parameters]) + stream_results(client, [tensor]))
    first, second = engine.requests[-2:]
    assert (first.sampling_params.max_tokens, first.sampling_params.temperature) == (2, 0.5)
    assert first.sampling_params.ignore_eos and second.sampling_params.max_tokens == 5
    assert set(results) == {"p", "t"}


def test_typed_contents_are_read_like_raw_contents(served: GrpcApp, engine: FakeEngine) -> None:
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name="fake", id="typed")
    request.inputs.add(
        name="text_input", datatype="BYTES", shape=[1]
    ).contents.bytes_contents.append(b"typed prompt")
    request.inputs.add(name="stream", datatype="BOOL", shape=[1]).contents.bool_contents.append(
        False
    )
    request.parameters["max_tokens"].int64_param = 2
    with grpc.insecure_channel(served.grpc_url) as channel:
        [response] = list(
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([request]))
        )
    assert response.error_message == "" and response.infer_response.id == "typed"
    assert response.infer_response.raw_output_contents[0][4:] == b"typed promptHello from"


async def test_asyncio_client_like_the_backend_sample(served: GrpcApp) -> None:
    prompts = ["Hello, my name is\n", "The most dangerous animal is\n"]
    requests = [
        vllm_request(
            p,
            str(i),
            stream=True,
            exclude_input_in_output=True,
            sampling_parameters={"temperature": "0.1", "top_p": "0.95", "max_tokens": "3"},
        )
        for i, p in enumerate(prompts)
    ]
    async with triton_grpc_aio.InferenceServerClient(url=served.grpc_url) as client:
        results = by_id(await aio_stream_results(client, requests))
    assert {i: text_of(r) for i, r in results.items()} == {
        "0": "Hello from the",
        "1": "Hello from the",
    }


def test_reserved_parameters_follow_triton(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request(
        "x", "s", sampling_parameters={"max_tokens": "1"}, exclude_input_in_output=True
    )
    # Triton's timeout is in microseconds: 60 s, so that a slow host answers within it
    request.update(priority=3, sequence_id=5, sequence_start=True, timeout=60_000_000)
    assert text_of(by_id(stream_results(client, [request]))["s"]) == "Hello"


def test_bool_inputs_from_several_tensors(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request("x", "b", sampling_parameters={"max_tokens": "1"})
    request["inputs"] = [
        bytes_input("text_input", ["x"]),
        bool_input("exclude_input_in_output", True),
    ]
    assert text_of(by_id(stream_results(client, [request]))["b"]) == "Hello"
