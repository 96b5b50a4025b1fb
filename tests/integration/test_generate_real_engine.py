"""The generate routes against the real vLLM engine serving smollm2."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest

from app.engine.cpu_defaults import CpuHost
from tests.support.openai_api import wait_engine_idle
from tests.support.sse import sse_events, stream_events

GENERATE = "/v2/models/smollm2/generate"
STREAM = "/v2/models/smollm2/generate_stream"
PROMPT = "What is Triton Inference Server?"


def test_readme_curl_answers_in_english_after_the_prompt(http: httpx.Client) -> None:
    response = http.post(
        GENERATE, json={"text_input": PROMPT, "parameters": {"stream": False, "temperature": 0}}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["model_name"] == "smollm2" and body["model_version"] == "1"
    text = body["text_output"]
    assert text.startswith(PROMPT)
    continuation = text[len(PROMPT) :]
    assert len(re.findall(r"[A-Za-z]{2,}", continuation)) >= 5, continuation


def test_the_config_shows_the_dtype_chosen_for_this_cpu(http: httpx.Client) -> None:
    """model.json does not pin dtype: bfloat16 (the model's) only on a CPU that computes it
    natively, else float32, with the reason in the model's config."""
    config = http.get("/v2/models/smollm2/config").json()
    note = config["parameters"]["engine_dtype"]["string_value"]
    expected = "auto: this CPU computes bfloat16" if CpuHost.this().native_bf16 else "float32: "
    assert note.startswith(expected), note


def test_temperature_zero_is_deterministic(http: httpx.Client) -> None:
    body = {
        "text_input": "Write a haiku about rivers.",
        "parameters": {"temperature": 0, "max_tokens": 24},
    }
    first, second = (http.post(GENERATE, json=body).json()["text_output"] for _ in range(2))
    assert first == second


def test_stream_sends_several_events_as_tokens_arrive(http: httpx.Client) -> None:
    events = stream_events(
        http,
        STREAM,
        {
            "text_input": "Tell me about the sea.",
            "parameters": {"max_tokens": 64, "ignore_eos": True},
        },
    )
    assert len(events) >= 8
    assert events[-1][0] - events[0][0] > 0.05, "events arrived together, not as generated"


def test_a_stream_starts_while_the_engine_prefills(http: httpx.Client) -> None:
    """The headers come once vLLM has accepted the request, before its first token: here a
    long prompt's prefill lies between them."""
    body = {"text_input": "word " * 1500, "parameters": {"max_tokens": 1}}
    with http.stream("POST", STREAM, json=body) as response:
        started = time.perf_counter()
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
        first_event = time.perf_counter()
    assert len(lines) == 1 and "error" not in json.loads(lines[0][5:])
    assert first_event - started > 0.05, "the headers came with the first token"


def test_stream_deltas_concatenate_to_the_non_stream_text(http: httpx.Client) -> None:
    params = {"temperature": 0, "max_tokens": 40}
    whole = http.post(
        GENERATE, json={"text_input": PROMPT, "exclude_input_in_output": True, "parameters": params}
    ).json()
    events = stream_events(http, STREAM, {"text_input": PROMPT, "parameters": params})
    assert "".join(e["text_output"] for _, e in events) == whole["text_output"]
    assert all("error" not in e for _, e in events)


def test_max_tokens_and_every_additional_output(http: httpx.Client) -> None:
    body = {
        "text_input": PROMPT,
        "parameters": {"max_tokens": 7, "ignore_eos": True, "logprobs": 2, "temperature": 0},
        "return_finish_reason": True,
        "return_cumulative_logprob": True,
        "return_logprobs": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    result = http.post(GENERATE, json=body).json()
    assert result["finish_reason"] == "length"
    assert result["num_output_tokens"] == 7
    assert result["num_input_tokens"] > len(PROMPT.split())
    logprobs = json.loads(result["logprobs"])
    assert len(logprobs) == 7
    assert all(1 <= len(position) <= 3 for position in logprobs)
    entry = next(iter(logprobs[0].values()))
    assert set(entry) == {"logprob", "rank", "decoded_token"}
    sampled = sum(max(p["logprob"] for p in position.values()) for position in logprobs)
    assert result["cumulative_logprob"] == pytest.approx(sampled, abs=1e-3)

    events = [e for _, e in stream_events(http, STREAM, {**body, "exclude_input_in_output": True})]
    assert sum(e["num_output_tokens"] for e in events) == 7
    assert [e["finish_reason"] for e in events][-1] == "length"
    assert all(e["finish_reason"] is None for e in events[:-1])
    assert all(e["num_input_tokens"] == result["num_input_tokens"] for e in events)
    assert sum(len(json.loads(e["logprobs"])) for e in events) == 7


def test_cumulative_logprob_without_sampling_logprobs(http: httpx.Client) -> None:
    result = http.post(
        GENERATE,
        json={"text_input": PROMPT, "return_cumulative_logprob": True, "return_logprobs": True},
    ).json()
    assert isinstance(result["cumulative_logprob"], float) and result["cumulative_logprob"] < 0
    assert result["logprobs"] == "null"


def test_n_two_returns_two_completions(http: httpx.Client) -> None:
    body = {
        "text_input": PROMPT,
        "parameters": {"n": 2, "temperature": 1.0, "seed": 1, "max_tokens": 8, "ignore_eos": True},
        "return_num_output_tokens": True,
        "return_finish_reason": True,
    }
    result = http.post(GENERATE, json=body).json()
    assert len(result["text_output"]) == 2 and all(
        t.startswith(PROMPT) for t in result["text_output"]
    )
    assert result["num_output_tokens"] == [8, 8] and result["finish_reason"] == ["length", "length"]
    events = [e for _, e in stream_events(http, STREAM, body)]
    assert all(len(e["text_output"]) == 2 for e in events)
    assert [sum(e["num_output_tokens"][i] for e in events) for i in (0, 1)] == [8, 8]


def test_stop_string_ends_the_output(http: httpx.Client) -> None:
    params = {"temperature": 0, "max_tokens": 40}
    free = http.post(
        GENERATE, json={"text_input": PROMPT, "exclude_input_in_output": True, "parameters": params}
    ).json()
    words = re.findall(r"[A-Za-z]{4,}", free["text_output"])
    stop_word = words[len(words) // 2]
    stopped = http.post(
        GENERATE,
        json={
            "text_input": PROMPT,
            "exclude_input_in_output": True,
            "return_finish_reason": True,
            "parameters": {**params, "stop": [stop_word]},
        },
    ).json()
    assert stopped["finish_reason"] == "stop"
    assert stop_word not in stopped["text_output"]
    assert free["text_output"].startswith(stopped["text_output"])


def test_repetition_detection_within_the_limit_ends_a_repeating_output(
    http: httpx.Client,
) -> None:
    """Two allowed tokens at temperature 0 repeat one: with `repetition_detection` (sizes as
    text too, as Triton clients send them) the output ends once a pattern stands 3 times."""
    params = {"temperature": 0, "max_tokens": 40, "allowed_token_ids": [28, 29]}
    body = {"text_input": "Say hello", "exclude_input_in_output": True}
    outputs = {"return_finish_reason": True, "return_num_output_tokens": True}
    detection = {"max_pattern_size": "256", "min_count": "3"}
    ended = http.post(
        GENERATE,
        json={**body, **outputs, "parameters": {**params, "repetition_detection": detection}},
    ).json()
    free = http.post(GENERATE, json={**body, **outputs, "parameters": params}).json()
    assert (free["finish_reason"], free["num_output_tokens"]) == ("length", 40)
    assert ended["finish_reason"] == "repetition" and ended["num_output_tokens"] < 40, ended


@pytest.mark.parametrize(
    ("route", "body", "message"),
    [
        (GENERATE, {"text_input": "word " * 3000}, "maximum context length"),
        (STREAM, {"text_input": "word " * 3000}, "maximum context length"),
        (GENERATE, {"text_input": "x", "parameters": {"temprature": 0}}, "parameters.temprature"),
        (GENERATE, {"text_input": ["x"]}, "text_input"),
        (GENERATE, {"parameters": {}}, "text_input: Field required"),
        (STREAM, {"text_input": "x", "parameters": {"n": 2, "temperature": 0}}, "n must be 1"),
        (GENERATE, {"text_input": "x", "parameters": {"max_tokens": -3}}, "parameters.max_tokens"),
        (
            GENERATE,
            {"text_input": "x", "parameters": {"lora_name": "x"}},
            "LoRA feature is not enabled.",
        ),
        (GENERATE, {"text_input": "x", "image": ["aGVsbG8="]}, "takes no images"),
        (
            GENERATE,
            {"text_input": "x", "parameters": {"allowed_token_ids": "5"}},
            "parameters.allowed_token_ids",
        ),
        (STREAM, {"text_input": "x", "parameters": {"logit_bias": "xyz"}}, "parameters.logit_bias"),
        (
            GENERATE,
            {"text_input": "x", "parameters": {"allowed_token_ids": [10**9]}},
            "allowed_token_ids",
        ),
        (
            STREAM,
            {"text_input": "x", "parameters": {"allowed_token_ids": [10**9]}},
            "allowed_token_ids",
        ),
        (GENERATE, {"text_input": "x", "parameters": {"logprobs": 10**8}}, "logprobs"),
        (STREAM, {"text_input": "x", "parameters": {"logprobs": 10**8}}, "logprobs"),
    ],
)
def test_bad_input_gets_400_naming_the_problem(
    http: httpx.Client, route: str, body: dict[str, Any], message: str
) -> None:
    response = http.post(route, json=body)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]


@pytest.mark.parametrize("route", [GENERATE, STREAM])
def test_a_request_ends_at_the_timeout_its_client_gave(http: httpx.Client, route: str) -> None:
    """Triton's `timeout` parameter (microseconds) bounds the request; `priority` is taken
    and left out of sampling (this engine queues first come, first served)."""
    parameters = {"max_tokens": 1900, "ignore_eos": True, "timeout": 500_000, "priority": 3}
    started = time.monotonic()
    response = http.post(route, json={"text_input": "Hi", "parameters": parameters})
    seconds = time.monotonic() - started
    timed_out = {"error": "Request timed out after 0.5 s and was aborted"}
    if response.status_code == 200:  # a stream that started before its deadline
        assert route == STREAM and sse_events(response)[-1] == timed_out
    else:
        assert response.status_code == 504 and response.json() == timed_out
    assert seconds < 30, seconds
    assert wait_engine_idle(str(http.base_url)), "the engine still holds the request"


def test_invalid_json_and_unknown_model(http: httpx.Client) -> None:
    response = http.post(GENERATE, content=b"{not json")
    assert response.status_code == 400 and response.json()["error"].startswith("body: Invalid JSON")
    response = http.post("/v2/models/nope/generate", json={"text_input": "x"})
    assert response.status_code == 404 and response.json() == {
        "error": "Request for unknown model: 'nope' is not found"
    }


def test_server_still_healthy_after_bad_requests(http: httpx.Client) -> None:
    assert http.get("/v2/health/ready").status_code == 200
    assert (
        http.post(GENERATE, json={"text_input": "Hi", "parameters": {"max_tokens": 2}}).status_code
        == 200
    )
