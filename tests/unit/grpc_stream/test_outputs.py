"""ModelStreamInfer's responses over a real grpc.aio server with the engine double, read by
tritonclient's sync client: the backend's additional outputs with their types and shapes, the
outputs a request asks for, n completions, the empty final response."""

from __future__ import annotations

import json

import numpy as np
import tritonclient.grpc as triton_grpc

from tests.support.triton_grpc import (
    by_id,
    is_final,
    stream_results,
    text_of,
    vllm_request,
)


def test_additional_outputs_have_the_backend_types_and_shapes(
    client: triton_grpc.InferenceServerClient,
) -> None:
    request = vllm_request(
        "one two three",
        "x",
        stream=True,
        exclude_input_in_output=True,
        outputs=None,
        sampling_parameters={"max_tokens": "3", "logprobs": "1"},
        return_finish_reason=True,
        return_cumulative_logprob=True,
        return_logprobs=True,
        return_num_input_tokens=True,
        return_num_output_tokens=True,
    )
    results = by_id(stream_results(client, [request]))["x"]
    assert len(results) == 3
    outputs = {o.name: (o.datatype, list(o.shape)) for o in results[0].get_response().outputs}
    assert outputs == {
        "text_output": ("BYTES", [1]),
        "finish_reason": ("BYTES", [1]),
        "cumulative_logprob": ("FP32", [1]),
        "logprobs": ("BYTES", [1]),
        "num_input_tokens": ("UINT32", []),
        "num_output_tokens": ("UINT32", [1]),
    }
    assert [r.as_numpy("finish_reason")[0] for r in results] == [b"None", b"None", b"length"]
    assert [float(r.as_numpy("cumulative_logprob")[0]) for r in results] == [-0.5, -1.0, -1.5]
    assert results[0].as_numpy("cumulative_logprob").dtype == np.float32
    assert (
        results[0].as_numpy("num_input_tokens").dtype == np.uint32
        and int(results[0].as_numpy("num_input_tokens")) == 3
    )
    assert [int(r.as_numpy("num_output_tokens")[0]) for r in results] == [1, 1, 1]
    [position] = json.loads(results[1].as_numpy("logprobs")[0])
    assert position == {"101": {"logprob": -0.5, "rank": 1, "decoded_token": " from"}}


def test_no_logprobs_parameter_gives_the_json_null(
    client: triton_grpc.InferenceServerClient,
) -> None:
    request = vllm_request(
        "x", "n", sampling_parameters={"max_tokens": "1"}, outputs=None, return_logprobs=True
    )
    [result] = by_id(stream_results(client, [request]))["n"]
    assert result.as_numpy("logprobs")[0] == b"null" and result.as_numpy("finish_reason") is None


def test_outputs_are_pruned_to_those_requested(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request(
        "x",
        "r",
        sampling_parameters={"max_tokens": "2"},
        outputs=["finish_reason"],
        return_finish_reason=True,
        return_num_output_tokens=True,
    )
    [result] = by_id(stream_results(client, [request]))["r"]
    assert [o.name for o in result.get_response().outputs] == ["finish_reason"]
    assert len(result.get_response().raw_output_contents) == 1


def test_n_completions_are_tensors_of_n_elements(client: triton_grpc.InferenceServerClient) -> None:
    request = vllm_request(
        "x",
        "n2",
        sampling_parameters={"max_tokens": "2", "n": "2"},
        exclude_input_in_output=True,
        outputs=None,
        return_num_output_tokens=True,
    )
    [result] = by_id(stream_results(client, [request]))["n2"]
    assert list(result.as_numpy("text_output")) == [b"Hello from", b" from the"]
    assert list(result.as_numpy("num_output_tokens")) == [2, 2]


def test_empty_final_response_when_the_client_asks(
    client: triton_grpc.InferenceServerClient,
) -> None:
    request = vllm_request(
        "x", "e", stream=True, exclude_input_in_output=True, sampling_parameters={"max_tokens": "2"}
    )
    request["enable_empty_final_response"] = True
    results = by_id(stream_results(client, [request]))["e"]
    assert [is_final(r) for r in results] == [False, False, True]
    assert text_of(results[:2]) == "Hello from" and results[2].get_response().outputs == []
    assert results[2].get_response().id == "e"
