"""OpenAI's Responses API (`/v1/responses`) against the real engine (the session server,
smollm2), driven by the official `openai` package: the same answer as the chat route, streamed
and not, structured output, what a server that stores nothing answers, hostile input and
clients that leave."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from tests.support.openai_api import body_of, engine_unfinished, openai_error, wait_engine_idle
from tests.support.servers import RunningServer

MODEL = "smollm2"
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def sdk(server: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key="none", max_retries=0, timeout=120
    ) as client:
        yield client


def test_a_response_is_the_chat_routes_answer_streamed_or_not(sdk: openai.OpenAI) -> None:
    chat = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=8, temperature=0
    )
    expected = chat.choices[0].message.content
    answer = sdk.responses.create(model=MODEL, input=QUESTION, max_output_tokens=8, temperature=0)
    assert answer.output_text == expected and answer.model == MODEL
    assert answer.usage is not None and chat.usage is not None
    assert answer.usage.input_tokens == chat.usage.prompt_tokens
    assert answer.usage.output_tokens == chat.usage.completion_tokens <= 8
    stream = sdk.responses.create(
        model=MODEL, input=QUESTION, max_output_tokens=8, temperature=0, stream=True
    )
    events = list(stream)
    assert [events[0].type, events[1].type, events[-1].type] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert "".join(deltas) == expected
    assert [event.sequence_number for event in events] == list(range(len(events)))


def test_a_non_streamed_answer_carries_its_log_probabilities(sdk: openai.OpenAI) -> None:
    """Built off the event loop, they are the answer's own: a token each, with its top 2."""
    answer = sdk.responses.create(
        model=MODEL,
        input=QUESTION,
        max_output_tokens=6,
        temperature=0,
        top_logprobs=2,
        include=["message.output_text.logprobs"],
    )
    message = answer.output[0]
    assert isinstance(message, ResponseOutputMessage)
    (text,) = message.content
    assert isinstance(text, ResponseOutputText) and text.logprobs is not None
    assert answer.usage is not None and len(text.logprobs) == answer.usage.output_tokens
    assert "".join(entry.token for entry in text.logprobs) == answer.output_text
    assert all(len(entry.top_logprobs) == 2 for entry in text.logprobs)
    assert all(entry.logprob <= 0 for entry in text.logprobs)


def test_json_schema_output_parses_and_validates(sdk: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "population": {"type": "integer", "minimum": 0, "maximum": 100_000_000},
        },
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    answer = sdk.responses.create(
        model=MODEL,
        input="Give the largest city of Japan and its population as JSON.",
        max_output_tokens=60,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "city", "schema": schema}},
    )
    jsonschema.validate(json.loads(answer.output_text), schema)


def test_nothing_is_stored_and_each_route_says_so(
    sdk: openai.OpenAI, server: RunningServer
) -> None:
    stored = sdk.responses.create(model=MODEL, input="Hi", max_output_tokens=2, store=True)
    assert stored.status in ("completed", "incomplete")
    for call in (
        lambda: sdk.responses.retrieve(stored.id),
        lambda: sdk.responses.cancel(stored.id),
        lambda: sdk.responses.create(
            model=MODEL, input="Hi", max_output_tokens=2, previous_response_id=stored.id
        ),
    ):
        with pytest.raises(openai.NotFoundError) as missing:
            call()
        assert "does not store responses" in body_of(missing.value)["message"]
    with pytest.raises(openai.BadRequestError) as background:
        sdk.responses.create(model=MODEL, input="Hi", max_output_tokens=2, background=True)
    assert body_of(background.value)["param"] == "background"
    url = f"{server.base_url}/v1/responses"
    assert "not valid JSON" in openai_error(httpx.post(url, content=b"{not json"), 400)["message"]
    lone = b'{"model": "smollm2", "input": "\\ud800"}'
    assert openai_error(httpx.post(url, content=lone), 400)["param"] == "input"
    assert wait_engine_idle(server.base_url)


NASTY: list[dict[str, Any]] = [
    {"top_k": 10**30},
    {"logit_bias": {"99999999": 1}},
    {"logit_bias": {"99999999": 1}, "stream": True},
    {"structured_outputs": {"regex": "("}},
    {"structured_outputs": {"regex": "("}, "stream": True},
    {"include": ["message.output_text.logprobs"], "top_logprobs": 10**6},
    {"input": "x " * 5000},
    {
        "input": [
            {
                "role": "user",
                "content": [{"type": "input_image", "image_url": "file:///etc/passwd"}],
            }
        ]
    },
    {
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "nope"}}],
        "tool_choice": "required",
    },
    {"prompt": {"id": "p"}},
    {"max_output_tokens": 0},
]


@pytest.mark.parametrize("extra", NASTY, ids=[json.dumps(extra)[:40] for extra in NASTY])
def test_hostile_values_are_4xx_and_leave_no_engine_request(
    server: RunningServer, extra: dict[str, Any]
) -> None:
    body = json.dumps({"model": MODEL, "input": "hi", "max_output_tokens": 4, **extra}).encode()
    response = httpx.post(f"{server.base_url}/v1/responses", content=body, timeout=60)
    assert 400 <= response.status_code < 500, response.text
    openai_error(response, response.status_code)
    assert wait_engine_idle(server.base_url, timeout=3)
    assert httpx.get(f"{server.base_url}/v2/health/ready").status_code == 200


def earlier_answer(*parts: dict[str, Any]) -> dict[str, Any]:
    """An assistant's output message of an earlier response, given back as input."""
    return {
        "type": "message",
        "role": "assistant",
        "id": "m",
        "status": "completed",
        "content": parts,
    }


ANSWER = {"type": "output_text", "text": "Paris.", "annotations": []}
REFUSAL = {"type": "refusal", "refusal": "I cannot help with that."}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    "parts", [(REFUSAL,), (REFUSAL, ANSWER), ()], ids=["refusal", "refusal-first", "empty"]
)
def test_an_earlier_answer_that_does_not_begin_with_text_is_a_400_naming_it(
    server: RunningServer, parts: tuple[dict[str, Any], ...], stream: bool
) -> None:
    """vLLM renders an assistant message of the input as its first part's text: without one
    (a refusal first, or no part) its rendering failed with a 500 (found by the fuzz tier)."""
    conversation = [
        {"role": "user", "content": QUESTION},
        earlier_answer(*parts),
        {"role": "user", "content": "Why?"},
    ]
    body = {"model": MODEL, "input": conversation, "max_output_tokens": 4, "stream": stream}
    response = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=60)
    error = openai_error(response, 400)
    assert error["param"] == "input[1].content", error
    assert "output_text" in error["message"], error
    assert wait_engine_idle(server.base_url, timeout=3)


def test_an_earlier_answer_given_back_as_input_is_read(server: RunningServer) -> None:
    """The conversation goes on from an answer that begins with text."""
    conversation = [
        {"role": "user", "content": QUESTION},
        earlier_answer(ANSWER),
        {"role": "user", "content": "And of Italy?"},
    ]
    body = {"model": MODEL, "input": conversation, "max_output_tokens": 8, "temperature": 0}
    response = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] in ("completed", "incomplete"), answer
    assert answer["output"][-1]["content"][0]["text"], answer


LONG = {"model": MODEL, "input": "Tell me a story", "max_output_tokens": 1500, "ignore_eos": True}


def test_a_client_leaving_a_stream_aborts_the_engine_request(server: RunningServer) -> None:
    with (
        httpx.Client(base_url=server.base_url, timeout=60) as client,
        client.stream("POST", "/v1/responses", json={**LONG, "stream": True}) as response,
    ):
        lines = response.iter_lines()
        assert next(line for line in lines if line == "event: response.output_text.delta")
        assert engine_unfinished(server.base_url) == 1
    assert wait_engine_idle(server.base_url)


def test_a_client_leaving_before_the_answer_aborts_the_engine_request(
    server: RunningServer,
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/v1/responses", json=LONG, timeout=1.5)
    assert wait_engine_idle(server.base_url)
