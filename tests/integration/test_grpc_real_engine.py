"""Triton's gRPC protocol against the real engine (the session server), with tritonclient's
sync and asyncio clients used as the vLLM backend's samples and CI tests use them."""

from __future__ import annotations

import asyncio
import itertools
import json
import queue
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_metrics_and_health import scrape
from tests.support.servers import RunningServer
from tests.support.triton_grpc import (
    aio_stream_results,
    by_id,
    is_final,
    stream_results,
    text_of,
    vllm_request,
)
from tests.support.waiting import wait_for

MODEL = "smollm2"
SAMPLE_PROMPTS = [
    "Hello, my name is",
    "The most dangerous animal is",
    "The capital of France is",
    "The future of AI is",
]
GREEDY_STRINGS = {"temperature": "0", "top_p": "1", "max_tokens": "24"}
GREEDY = {"temperature": 0, "top_p": 1, "max_tokens": 24}


@pytest.fixture
def client(server: RunningServer) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(server.grpc_url) as grpc_client:
        yield grpc_client


async def sample_client(
    url: str, prompts_file: Path, results_file: Path, streaming: bool, exclude: bool
) -> dict[str, str]:
    """Written like the backend's samples/client.py: prompts read with readlines() (each keeps
    its newline), one stream for all of them, string-valued sampling parameters sent as the
    tensor and as request parameters, the text appended per response id, a results file (in
    the order the first responses came, as the sample writes it). The text of each id."""
    prompts = (await asyncio.to_thread(prompts_file.read_text)).splitlines(keepends=True)
    results: dict[str, list[str]] = {}

    async def requests() -> AsyncIterator[dict[str, Any]]:
        for index, prompt in enumerate(prompts):
            yield vllm_request(
                prompt,
                str(index),
                streaming,
                GREEDY_STRINGS,
                MODEL,
                exclude_input_in_output=exclude,
            )

    async with triton_grpc_aio.InferenceServerClient(url=url) as client:
        async for result, error in client.stream_infer(inputs_iterator=requests()):
            assert error is None, f"Encountered error while processing: {error}"
            for element in result.as_numpy("text_output"):
                results.setdefault(result.get_response().id, []).append(element.decode("utf-8"))
    with results_file.open("w") as file:
        for parts in results.values():
            file.write("".join(parts) + "\n" + "\n=========\n\n")
    return {request_id: "".join(parts) for request_id, parts in results.items()}


def http_text(server: RunningServer, prompt: str, exclude: bool) -> str:
    body = {"text_input": prompt, "parameters": GREEDY, "exclude_input_in_output": exclude}
    response = httpx.post(f"{server.base_url}/v2/models/{MODEL}/generate", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return str(response.json()["text_output"])


@pytest.mark.parametrize(("streaming", "exclude"), [(False, False), (True, True)])
def test_sample_client_gets_each_prompts_text(
    server: RunningServer, tmp_path: Path, streaming: bool, exclude: bool
) -> None:
    """All prompts on one stream, as the sample sends them: every id gets its own text (its
    prompt first unless excluded) and the results file one block per prompt. Batched greedy
    decoding on a CPU may part from a lone request's after a few tokens, so the exact text is
    compared prompt by prompt below."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"{p}\n" for p in SAMPLE_PROMPTS))
    results = tmp_path / "results.txt"
    texts = asyncio.run(sample_client(server.grpc_url, prompts, results, streaming, exclude))
    assert sorted(texts) == [str(i) for i in range(len(SAMPLE_PROMPTS))]
    for index, prompt in enumerate(SAMPLE_PROMPTS):
        text = texts[str(index)]
        assert text.strip()
        assert exclude or text.startswith(f"{prompt}\n"), (prompt, text)
    assert results.read_text().count("\n=========\n\n") == len(SAMPLE_PROMPTS)


@pytest.mark.parametrize(("streaming", "exclude"), [(False, False), (True, True)])
@pytest.mark.parametrize("prompt", SAMPLE_PROMPTS)
def test_sample_client_gets_the_http_text(
    server: RunningServer, tmp_path: Path, prompt: str, streaming: bool, exclude: bool
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(f"{prompt}\n")
    texts = asyncio.run(
        sample_client(server.grpc_url, prompts, tmp_path / "results.txt", streaming, exclude)
    )
    assert texts == {"0": http_text(server, f"{prompt}\n", exclude)}


def test_streaming_without_excluding_the_prompt_is_the_backend_error(
    client: triton_grpc.InferenceServerClient,
) -> None:
    request = vllm_request("Hi", "1", True, GREEDY_STRINGS, MODEL, exclude_input_in_output=False)
    [(result, error)] = stream_results(client, [request])
    assert result is None
    assert error.message() == (
        "Error generating stream: When streaming, `exclude_input_in_output` = False is not allowed."
    )


def test_sync_client_non_streaming_matches_http(
    server: RunningServer, client: triton_grpc.InferenceServerClient
) -> None:
    """One request per stream: greedy text is compared with a lone HTTP request's, and batched
    decoding on a CPU may part from it."""
    for index, prompt in enumerate(SAMPLE_PROMPTS[:2]):
        request = vllm_request(
            prompt, str(index), False, GREEDY, MODEL, send_parameters_as_tensor=False
        )
        results = by_id(stream_results(client, [request]))
        assert list(results) == [str(index)] and len(results[str(index)]) == 1
        assert is_final(results[str(index)][0])
        assert text_of(results[str(index)]) == http_text(server, prompt, False)


def test_every_additional_output_with_its_type(client: triton_grpc.InferenceServerClient) -> None:
    """As the backend's L0_additional_outputs_vllm checks them, streaming with logprobs."""
    request = vllm_request(
        "In this example,",
        "",
        True,
        {
            "temperature": "0",
            "top_p": "1",
            "max_tokens": "12",
            "logprobs": 2,
            "apply_chat_template": "false",
        },
        MODEL,
        exclude_input_in_output=True,
        outputs=None,
        return_finish_reason=True,
        return_cumulative_logprob=True,
        return_logprobs=True,
        return_num_input_tokens=True,
        return_num_output_tokens=True,
    )
    results = by_id(stream_results(client, [request]))[""]
    reasons = [r.as_numpy("finish_reason")[0].decode() for r in results]
    assert reasons[:-1] == ["None"] * (len(results) - 1) and reasons[-1] == "length"
    cumulative = [float(r.as_numpy("cumulative_logprob")[0]) for r in results]
    assert all(a != b for a, b in itertools.pairwise(cumulative))
    text = ""
    for result in results:
        assert result.as_numpy("cumulative_logprob").dtype.name == "float32"
        count = int(result.as_numpy("num_output_tokens")[0])
        positions = json.loads(result.as_numpy("logprobs")[0])
        assert count > 0 and len(positions) == count
        for position in positions:
            assert 1 <= len(position) <= 3 and all(key.isdigit() for key in position)
            [top] = [v for v in position.values() if v["rank"] == 1]
            text += top["decoded_token"]
        assert 0 < int(result.as_numpy("num_input_tokens")) <= len("In this example,")
        assert result.as_numpy("num_input_tokens").shape == ()
    assert text == text_of(results)


def test_n_completions(client: triton_grpc.InferenceServerClient) -> None:
    sampling = {"temperature": "1", "seed": "3", "max_tokens": "8", "n": "3"}
    request = vllm_request(
        "Tell me a joke.",
        "n",
        False,
        sampling,
        MODEL,
        exclude_input_in_output=True,
        outputs=None,
        return_num_output_tokens=True,
    )
    [result] = by_id(stream_results(client, [request]))["n"]
    counts = list(result.as_numpy("num_output_tokens"))
    assert result.as_numpy("text_output").shape == (3,) and counts == [8, 8, 8]
    assert len(set(result.as_numpy("text_output"))) > 1


def test_bad_requests_do_not_break_the_stream(client: triton_grpc.InferenceServerClient) -> None:
    requests = [
        vllm_request(
            "Hi", "bad-stream", True, GREEDY_STRINGS, MODEL, exclude_input_in_output=False
        ),
        vllm_request("Hi", "bad-model", False, GREEDY_STRINGS, "nope"),
        vllm_request("Hi", "bad-value", False, {"max_tokens": "99999"}, MODEL),
        vllm_request("Hi", "i" * 257, True, GREEDY_STRINGS, MODEL, exclude_input_in_output=True),
        vllm_request("Hi", "good", True, GREEDY_STRINGS, MODEL, exclude_input_in_output=True),
    ]
    results = stream_results(client, requests)
    errors = sorted(error.message() for _, error in results if error is not None)
    assert errors == [
        "Error generating stream: When streaming, "
        "`exclude_input_in_output` = False is not allowed.",
        "Request for unknown model: 'nope' is not found",
        "id: an id of 257 characters is longer than 256",
        "parameters.max_tokens: 99999 is above the model's context length of 2048 tokens",
    ]
    good = by_id([r for r in results if r[1] is None])["good"]
    assert text_of(good) and is_final(good[-1]) and not any(is_final(r) for r in good[:-1])


def test_cancelling_50_streams_leaves_no_engine_request(server: RunningServer) -> None:
    http = httpx.Client(base_url=server.base_url, timeout=30)
    long = {"max_tokens": "1500", "ignore_eos": "true"}

    def story(index: int) -> dict[str, Any]:
        prompt = f"Story {index}:"
        return vllm_request(prompt, str(index), True, long, MODEL, exclude_input_in_output=True)

    async def one(request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        yield request

    async def run() -> None:
        async with triton_grpc_aio.InferenceServerClient(url=server.grpc_url) as client:
            streams = [client.stream_infer(inputs_iterator=one(story(i))) for i in range(50)]
            firsts = await asyncio.gather(*(anext(stream) for stream in streams))
            assert all(error is None for _, error in firsts)
            assert scrape(http)["server_engine_requests_unfinished"] == 50
            for stream in streams:
                stream.cancel()

    def nothing_left() -> bool:
        metrics = scrape(http)
        left = metrics["server_engine_requests_unfinished"], metrics["server_requests_in_flight"]
        return left == (0, 0)

    asyncio.run(run())
    assert wait_for(nothing_left, 30)
    assert "[vllm] Cancelling the request" in server.log_path.read_text()
    http.close()


def test_cancelled_non_streaming_request_as_the_backend_ci(
    server: RunningServer, client: triton_grpc.InferenceServerClient
) -> None:
    """L0_backend_vllm/request_cancellation: cancel while it runs (the CI waits 1 s; here, until
    the engine holds it: its answer, to the length limit, outlasts that on any host); the
    client gets only CANCELLED."""
    http = httpx.Client(base_url=server.base_url, timeout=30)
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(lambda result, error: received.put((result, error)))
    client.async_stream_infer(
        **vllm_request(
            "Write an original and creative poem of at least 200 words.",
            "1",
            False,
            {"temperature": "0", "top_p": "1", "max_tokens": "1500", "ignore_eos": "true"},
            MODEL,
        )
    )
    assert wait_for(lambda: scrape(http)["server_engine_requests_unfinished"] == 1, 60, 0.1)
    client.stop_stream(cancel_requests=True)
    time.sleep(1)
    [(result, error)] = [received.get_nowait() for _ in range(received.qsize())]
    assert result is None and error.status() == "StatusCode.CANCELLED"
    assert wait_for(lambda: scrape(http)["server_engine_requests_unfinished"] == 0, 30)

    def cancellation_logged() -> bool:
        log = server.log_path.read_text()
        return (
            "[vllm] Cancelling the request" in log
            and "[vllm] Successfully cancelled the request" in log
        )

    assert wait_for(cancellation_logged, 30)
    http.close()


def grpc_requests_ok(http: httpx.Client) -> float:
    """Inference requests that ModelStreamInfer streams served with status OK."""
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if (
                sample.name == "grpc_server_stream_requests_total"
                and sample.labels["grpc_code"] == "OK"
            ):
                return sample.value
    return 0.0


def test_metrics_and_statistics_count_the_requests_sent(
    server: RunningServer, client: triton_grpc.InferenceServerClient
) -> None:
    http = httpx.Client(base_url=server.base_url, timeout=30)

    def counts() -> tuple[float, float, int, int]:
        metrics = scrape(http)
        stats = client.get_inference_statistics(MODEL).model_stats[0]
        http_stats = http.get(f"/v2/models/{MODEL}/stats").json()["model_stats"][0]
        assert (
            http_stats["inference_stats"]["success"]["count"] == stats.inference_stats.success.count
        )
        return (
            metrics["vllm:e2e_request_latency_seconds_count"],
            grpc_requests_ok(http),
            stats.inference_stats.success.count,
            stats.inference_count,
        )

    before = counts()
    requests = [
        vllm_request(
            "Count me.",
            str(i),
            i % 2 == 1,
            {"max_tokens": "4"},
            MODEL,
            exclude_input_in_output=True,
        )
        for i in range(3)
    ]
    stream_results(client, requests)
    after = counts()
    assert [round(a - b) for a, b in zip(after, before, strict=False)] == [3, 3, 3, 3]
    http.close()


def test_health_metadata_config_repository_and_statistics_rpcs(
    client: triton_grpc.InferenceServerClient,
) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(MODEL) and not client.is_model_ready("nope")
    assert "statistics" in client.get_server_metadata().extensions
    metadata = client.get_model_metadata(MODEL)
    assert metadata.platform == "vllm" and metadata.inputs[0].name == "text_input"
    config = client.get_model_config(MODEL).config
    assert config.model_transaction_policy.decoupled and config.max_batch_size == 0
    assert {t.name: t.optional for t in config.input}["stream"] is True
    [entry] = [m for m in client.get_model_repository_index().models if m.name == MODEL]
    assert (entry.version, entry.state) == ("1", "READY")
    assert client.get_inference_statistics(MODEL).model_stats[0].name == MODEL
    with pytest.raises(triton_grpc.InferenceServerException, match="decoupled"):
        client.infer(MODEL, vllm_request("x")["inputs"])


async def test_asyncio_client_streams_deltas(server: RunningServer) -> None:
    request = vllm_request(
        "Count to five.", "d", True, GREEDY_STRINGS, MODEL, exclude_input_in_output=True
    )
    async with triton_grpc_aio.InferenceServerClient(url=server.grpc_url) as client:
        results = by_id(await aio_stream_results(client, [request]))["d"]
    assert len(results) > 1 and text_of(results) == http_text(server, "Count to five.", True)
