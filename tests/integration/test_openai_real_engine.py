"""The OpenAI API against the real engine (the session server, smollm2), driven by the official
`openai` package, sync and async, streaming and not."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionTokenLogprob,
    ChatCompletionToolParam,
)
from transformers import AutoTokenizer

from app.paths import PROJECT_ROOT
from tests.support.openai_api import (
    body_of,
    engine_unfinished,
    extra_of,
    openai_error,
    usage_of,
    wait_engine_idle,
)
from tests.support.servers import RunningServer

MODEL = "smollm2"
PROMPT = "The capital of France is"
QUESTION = "What is the capital of France?"
TRITON = "/v2/models/smollm2/generate"
WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def sdk(server: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key="none", max_retries=0, timeout=120
    ) as client:
        yield client


@pytest.fixture
async def async_sdk(server: RunningServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{server.base_url}/v1", api_key="none", max_retries=0, timeout=120
    ) as client:
        yield client


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(PROJECT_ROOT / ".cache" / "models" / MODEL)


def triton_text(http: httpx.Client, prompt: str, max_tokens: int, chat_template: bool) -> str:
    """What the Triton route generates for the same prompt (new text only, greedy)."""
    body = {
        "text_input": prompt,
        "exclude_input_in_output": True,
        "parameters": {
            "temperature": 0,
            "max_tokens": max_tokens,
            "apply_chat_template": chat_template,
        },
    }
    response = http.post(TRITON, json=body)
    assert response.status_code == 200, response.text
    text: str = response.json()["text_output"]
    return text


def test_models_list_and_retrieve(sdk: openai.OpenAI) -> None:
    models = sdk.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].owned_by == "vllm" and extra_of(models.data[0])["max_model_len"] == 2048
    assert (
        sdk.models.retrieve(MODEL).id == MODEL
        and sdk.models.retrieve(f"{MODEL}/1").id == f"{MODEL}/1"
    )


def test_completion_equals_the_triton_route(
    sdk: openai.OpenAI, http: httpx.Client, tokenizer
) -> None:
    expected = triton_text(http, PROMPT, 16, chat_template=False)
    result = sdk.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=16,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    choice = result.choices[0]
    assert result.model == MODEL and result.object == "text_completion" and choice.text == expected
    usage = usage_of(result)
    assert usage.prompt_tokens == len(tokenizer(PROMPT).input_ids)
    assert usage.completion_tokens == len(extra_of(choice)["token_ids"]) == 16
    assert usage.total_tokens == usage.prompt_tokens + 16


def test_streamed_completion_is_the_same_text_and_usage(
    sdk: openai.OpenAI, http: httpx.Client
) -> None:
    expected = triton_text(http, PROMPT, 16, chat_template=False)
    chunks = list(
        sdk.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len(chunks) > 5 and "".join(c.choices[0].text for c in chunks if c.choices) == expected
    assert chunks[-1].choices == [] and usage_of(chunks[-1]).completion_tokens == 16


async def test_chat_equals_the_triton_route_with_the_chat_template(
    async_sdk: openai.AsyncOpenAI, http: httpx.Client, tokenizer
) -> None:
    expected = triton_text(http, QUESTION, 24, chat_template=True)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]
    result = await async_sdk.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=24, temperature=0
    )
    assert (
        result.choices[0].message.content == expected
        and result.choices[0].message.role == "assistant"
    )
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_tokens = len(tokenizer(prompt, add_special_tokens=False).input_ids)
    assert usage_of(result).prompt_tokens == prompt_tokens
    stream = await async_sdk.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert usage_of(chunks[-1]).completion_tokens == usage_of(result).completion_tokens


def test_a_stream_starts_while_the_engine_prefills(http: httpx.Client) -> None:
    """As with `vllm serve`: the headers once vLLM's serving code has checked the request,
    before the first token (a long prompt's prefill lies between them)."""
    body = {"model": MODEL, "prompt": "word " * 1500, "max_tokens": 1, "stream": True}
    with http.stream("POST", "/v1/completions", json=body) as response:
        started = time.perf_counter()
        assert response.status_code == 200
        frames = [line for line in response.iter_lines() if line.startswith("data:")]
        first_frame = time.perf_counter()
    assert frames[-1] == "data: [DONE]" and "choices" in json.loads(frames[0][5:])
    assert first_frame - started > 0.05, "the headers came with the first token"


def test_n_completions_with_logprobs(sdk: openai.OpenAI) -> None:
    result = sdk.completions.create(
        model=MODEL,
        prompt="Once upon a time",
        max_tokens=6,
        n=2,
        temperature=1.0,
        logprobs=2,
        extra_body={"ignore_eos": True},
    )
    assert sorted(c.index for c in result.choices) == [0, 1]
    assert usage_of(result).completion_tokens == 12
    for choice in result.choices:
        logprobs = choice.logprobs
        assert logprobs is not None
        tokens, values, tops = logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs
        assert tokens is not None and values is not None and tops is not None
        assert len(tokens) == len(values) == len(tops) == 6
        assert all(
            2 <= len(top) <= 3 and value <= 0 for top, value in zip(tops, values, strict=False)
        )
        assert "".join(tokens) == choice.text


async def test_chat_logprobs_and_two_choices_streamed(async_sdk: openai.AsyncOpenAI) -> None:
    stream = await async_sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hi"}],
        max_tokens=5,
        n=2,
        logprobs=True,
        top_logprobs=2,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    entries: dict[int, list[ChatCompletionTokenLogprob]] = {0: [], 1: []}
    async for chunk in stream:
        for choice in chunk.choices:
            entries[choice.index] += (choice.logprobs.content or []) if choice.logprobs else []
    assert [len(found) for found in entries.values()] == [5, 5]
    assert all(len(entry.top_logprobs) == 2 for found in entries.values() for entry in found)


def test_json_schema_output_parses_and_validates(sdk: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {  # bounded: unbounded, greedy decoding may write digits to the limit
            "city": {"type": "string", "maxLength": 40},
            "population": {"type": "integer", "minimum": 0, "maximum": 100_000_000},
        },
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    result = sdk.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": "Give the largest city of Japan and its population as JSON.",
            }
        ],
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
    )
    assert result.choices[0].finish_reason == "stop"
    content = result.choices[0].message.content
    assert content is not None
    jsonschema.validate(json.loads(content), schema)


def test_named_tool_choice_returns_a_call_with_valid_arguments(sdk: openai.OpenAI) -> None:
    result = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
        temperature=0,
    )
    tool_calls = result.choices[0].message.tool_calls
    assert tool_calls is not None
    (call,) = tool_calls
    assert isinstance(call, ChatCompletionMessageFunctionToolCall), call
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


async def test_named_tool_choice_streamed(async_sdk: openai.AsyncOpenAI) -> None:
    stream = await async_sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
        temperature=0,
        stream=True,
    )
    names: list[str] = []
    arguments = ""
    async for chunk in stream:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert call.function is not None
            names += [call.function.name] if call.function.name else []
            arguments += call.function.arguments or ""
    assert names == ["get_weather"]
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])


def test_bad_input_and_unknown_models_in_openai_shape(
    sdk: openai.OpenAI, server: RunningServer
) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.completions.create(model="other", prompt="x")
    assert missing.value.body == {
        "message": "The model `other` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=-1
        )
    assert body_of(bad.value)["param"] == "temperature"
    assert body_of(bad.value)["type"] == "BadRequestError"
    with pytest.raises(openai.BadRequestError) as too_long:
        sdk.completions.create(model=MODEL, prompt="x", max_tokens=5000)
    assert body_of(too_long.value)["param"] == "max_tokens"
    error = openai_error(httpx.post(f"{server.base_url}/v1/completions", content=b"{not json"), 400)
    assert error["type"] == "BadRequestError" and "not valid JSON" in error["message"]


@pytest.mark.parametrize(
    ("path", "prompt"),
    [
        ("/v1/completions", {"prompt": PROMPT}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
    ],
)
def test_a_client_leaving_a_stream_aborts_the_engine_request(
    server: RunningServer, path: str, prompt: dict[str, Any]
) -> None:
    body = {"model": MODEL, "max_tokens": 1500, "ignore_eos": True, "stream": True, **prompt}
    with (
        httpx.Client(base_url=server.base_url, timeout=60) as client,
        client.stream("POST", path, json=body) as response,
    ):
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        assert engine_unfinished(server.base_url) == 1
    assert wait_engine_idle(server.base_url)


def test_a_client_leaving_before_the_answer_aborts_the_engine_request(
    server: RunningServer,
) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": 1500,
        "ignore_eos": True,
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=1.5)
    assert wait_engine_idle(server.base_url)


NASTY = [
    ("/v1/completions", {"top_k": 10**30}),
    ("/v1/completions", {"logit_bias": {str(2**70): 1}}),
    ("/v1/completions", {"prompt": [99999999]}),
    ("/v1/completions", {"prompt": [[]]}),
    ("/v1/completions", {"seed": -(10**30)}),
    ("/v1/completions", {"n": 10**9}),
    ("/v1/completions", {"prompt": "\ud800"}),
    ("/v1/completions", {"structured_outputs": {"regex": "("}}),
    ("/v1/completions", {"use_beam_search": True, "stream": True}),
    (
        "/v1/chat/completions",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}],
                }
            ]
        },
    ),
    ("/v1/chat/completions", {"chat_template": "{{ 1/0 }}"}),
    (
        "/v1/chat/completions",
        {
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}
            ],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
        },
    ),
    ("/v1/chat/completions", {"tool_choice": "required"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 20000}]}),
    ("/v1/chat/completions", {"top_logprobs": 10**6, "logprobs": True}),
]


@pytest.mark.parametrize(
    ("path", "extra"), NASTY, ids=[json.dumps(extra)[:40] for _, extra in NASTY]
)
def test_hostile_values_are_4xx_and_leave_no_engine_request(
    server: RunningServer, path: str, extra: dict[str, Any]
) -> None:
    base = (
        {"prompt": "hi"}
        if "chat" not in path
        else {"messages": [{"role": "user", "content": "hi"}]}
    )
    body = json.dumps({"model": MODEL, "max_tokens": 4, **base, **extra}).encode()
    response = httpx.post(f"{server.base_url}{path}", content=body, timeout=60)
    assert 400 <= response.status_code < 500, response.text
    openai_error(response, response.status_code)
    assert wait_engine_idle(server.base_url, timeout=3)
    assert httpx.get(f"{server.base_url}/v2/health/ready").status_code == 200
