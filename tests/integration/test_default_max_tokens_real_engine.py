"""MAX_TOKENS_LIMIT on requests that set no bound of their own, against the real engine (the
session's limited server, MAX_TOKENS_LIMIT=2): on every protocol such a request asks vLLM's
default within the limit, so it ends after 2 new tokens (`ignore_eos` keeps the model from
ending sooner), where vLLM's default alone would be 16 (completions) or the rest of the
context (chat). The Responses API's is tests/integration/test_openai_limits_real_engine.py's."""

from __future__ import annotations

import json
import queue
from typing import Any

import httpx
import pytest
import tritonclient.grpc as triton_grpc

from tests.support.servers import RunningServer
from tests.support.triton_grpc import bool_input, bytes_input

LIMIT = 2
STORY = "Tell me a story"
TRITON_BODY = {
    "text_input": STORY,
    "parameters": {"ignore_eos": True},
    "exclude_input_in_output": True,
    "return_num_output_tokens": True,
}
OPENAI_BODIES: dict[str, dict[str, Any]] = {
    "completions": {"prompt": STORY},
    "chat/completions": {"messages": [{"role": "user", "content": STORY}]},
}


def sse_data(text: str) -> list[dict[str, Any]]:
    lines = (line.removeprefix("data: ") for line in text.splitlines())
    return [json.loads(line) for line in lines if line.startswith("{")]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_triton_http(limited_server: RunningServer, route: str) -> None:
    url = f"{limited_server.base_url}/v2/models/smollm2/{route}"
    response = httpx.post(url, json=TRITON_BODY, timeout=120)
    assert response.status_code == 200, response.text
    answers = sse_data(response.text) if route == "generate_stream" else [response.json()]
    assert sum(answer["num_output_tokens"] for answer in answers) == LIMIT


def test_triton_grpc_stream(limited_server: RunningServer) -> None:
    inputs = [
        bytes_input("text_input", [STORY]),
        bytes_input("sampling_parameters", [json.dumps(TRITON_BODY["parameters"])]),
        bool_input("exclude_input_in_output", True),
        bool_input("return_num_output_tokens", True),
    ]
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with triton_grpc.InferenceServerClient(limited_server.grpc_url) as client:
        client.start_stream(lambda result, error: received.put((result, error)))
        client.async_stream_infer(model_name="smollm2", inputs=inputs)
        client.stop_stream()
    result, error = received.get(timeout=120)
    assert error is None
    assert int(result.as_numpy("num_output_tokens")[0]) == LIMIT


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(OPENAI_BODIES))
def test_openai(limited_server: RunningServer, path: str, stream: bool) -> None:
    body = {"model": "smollm2", **OPENAI_BODIES[path], "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    response = httpx.post(f"{limited_server.base_url}/v1/{path}", json=body, timeout=120)
    assert response.status_code == 200, response.text
    usage = sse_data(response.text)[-1]["usage"] if stream else response.json()["usage"]
    assert usage["completion_tokens"] == LIMIT
