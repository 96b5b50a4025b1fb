"""The OpenAI API's limits: a body far above one is refused by the frontend before the
request is admitted (its model's OpenAI API never sees it), streaming or not, in well under
100 ms of server time; what only the engine adapter can check (the model's max_logprobs, a
value as vLLM's request models read it) is refused before vLLM's serving code runs.
tests/integration/test_limits_real_engine.py sends the same bodies to the real engine."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from app.core.guard import RequestGuard
from app.core.limits import RequestLimits
from app.engine.vllm_openai.compat import (
    ChatCompletionRequest,
    CompletionRequest,
    ResponsesRequest,
)
from app.engine.vllm_openai.limits import ModelBounds, read_within_limits, values_of
from app.engine.vllm_openai.serving import Servers, VllmOpenAIServing
from app.errors import InvalidRequestError
from app.openai.limits import check_body
from app.schemas.openai import OpenAIEndpoint
from tests.support.probe import access_times, readiness_probe
from tests.support.triton_grpc import GrpcApp
from tests.unit.test_request_limits import (
    MANY,
    PROBE_LIMIT_S,
    SERVER_TIME_LIMIT_MS,
    best_of_three,
    served,
)

__all__ = ["served"]


class NotServed:
    """Stands for vLLM's serving objects: a request that passes the limits fails the test."""

    _servers = Servers(
        completion=SimpleNamespace(create_completion=None),
        chat=SimpleNamespace(create_chat_completion=None),
        responses=None,
        renderer=None,
    )
    _llm = SimpleNamespace(
        model_config=SimpleNamespace(
            max_logprobs=20, max_model_len=2048, get_vocab_size=lambda: 49_152
        )
    )

    async def _serve(self, *args: Any) -> Any:
        raise AssertionError("the request reached vLLM's serving code")


OPENAI_CASES = [
    ("n", {"n": 1_000_000_000}, "n: 1000000000 is above this server's limit of 16"),
    ("max_tokens", {"max_tokens": 2**31 - 1}, "max_tokens: 2147483647 is above"),
    ("best_of", {"best_of": 1_000_000_000}, "best_of: not supported"),
    ("best_of_as_text", {"best_of": "2"}, "best_of: not supported"),
    ("stop", {"stop": ["x"] * MANY}, f"stop: {MANY} stop strings and bad words"),
    ("bad_words", {"bad_words": ["x"] * MANY}, "bad_words: "),
    ("bad_words_bytes", {"bad_words": ["x" * 7_000_000]}, "bad_words: stop strings and bad"),
    ("stop_bytes", {"stop": "x" * 20_000}, "stop: stop strings and bad words are over"),
    (
        "choice",
        {"structured_outputs": {"choice": [f"option {i}" for i in range(MANY)]}},
        "structured_outputs: the grammar is over this server's limit of 65536 bytes",
    ),
    ("guided_regex", {"guided_regex": "a|" * MANY}, "guided_regex: the grammar is over"),
    (
        "response_format",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"enum": list(range(MANY))}},
            }
        },
        "response_format: the grammar is over",
    ),
    ("stop_token_ids", {"stop_token_ids": [1] * MANY}, "stop_token_ids: "),
    ("allowed_token_ids", {"allowed_token_ids": list(range(MANY))}, "allowed_token_ids: "),
    ("logit_bias", {"logit_bias": {str(i): 1.0 for i in range(MANY)}}, "logit_bias: "),
    (
        "logprobs",
        {"logprobs": 1_000_000_000},
        "logprobs: 1000000000 is above the model's limit of 20",
    ),
    (
        "top_logprobs",
        {"top_logprobs": 10**9},
        "top_logprobs: 1000000000 is above the model's limit of 20",
    ),
    ("prompt_logprobs", {"prompt_logprobs": 10**9}, "prompt_logprobs: 1000000000 is above"),
    ("n_as_text", {"n": "1000000000"}, "n: 1000000000 is above"),
    (
        "messages",
        {"messages": [{"role": "user", "content": "a"}] * 4096},
        "messages: 4096 messages are above this server's limit of 2048",
    ),
    (
        "content_parts",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 3000}] * 2},
        "messages[1].content: 6000 content parts and tool calls are above this server's "
        "limit of 4096",
    ),
    (
        "tool_calls",
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}] * 5000},
            ]
        },
        "messages[1].tool_calls: 5000 content parts and tool calls are above",
    ),
    (
        "tools",
        {"tools": [{"type": "function", "function": {"name": "f"}}] * 4096},
        "tools: 4096 tools are above this server's limit of 128",
    ),
    (
        "repetition_detection",
        {"repetition_detection": {"max_pattern_size": 10**9, "min_count": 2}},
        "repetition_detection.max_pattern_size: 1000000000 is above this server's limit of 256",
    ),
    (
        "repetition_detection_as_text",
        {"repetition_detection": {"max_pattern_size": "1000000000", "min_count": 2}},
        "repetition_detection.max_pattern_size: 1000000000 is above",
    ),
    (
        "request_id",
        {"request_id": "x" * 7_000_000},
        "request_id: an id of 7000000 characters is longer than 256",
    ),
]
ENGINE_CHECKED = {
    "logprobs",
    "top_logprobs",
    "prompt_logprobs",
    "n_as_text",
    "repetition_detection_as_text",
}
"""Cases the engine adapter refuses: the model's bound on log probabilities, and a value
as vLLM reads it."""
OPENAI_BODIES: dict[OpenAIEndpoint, dict[str, Any]] = {
    OpenAIEndpoint.COMPLETIONS: {"model": "fake", "prompt": "Hi"},
    OpenAIEndpoint.CHAT_COMPLETIONS: {
        "model": "fake",
        "messages": [{"role": "user", "content": "Hi"}],
    },
}


OPENAI_PATHS = {
    OpenAIEndpoint.COMPLETIONS: "completions",
    OpenAIEndpoint.CHAT_COMPLETIONS: "chat/completions",
}


async def refusal_seconds(
    endpoint: OpenAIEndpoint, body: dict[str, Any]
) -> tuple[InvalidRequestError, float]:
    """The refusal of `body` on its way to vLLM's serving code: the frontend's check of the
    body as sent, then the engine adapter's (the model's bounds, the values as read)."""
    started = time.perf_counter()
    with pytest.raises(InvalidRequestError) as raised:
        await to_vllms_serving_code(endpoint, body)
    return raised.value, time.perf_counter() - started


async def to_vllms_serving_code(endpoint: OpenAIEndpoint, body: dict[str, Any]) -> None:
    limits = RequestLimits(max_tokens=16, max_n=16)
    check_body(body, limits, endpoint.max_tokens_field(body))
    guard = RequestGuard("limits", limits)
    await VllmOpenAIServing.create(
        NotServed(),  # type: ignore[arg-type]
        endpoint,
        body,
        guard=guard,
        adapter=None,
        headers={},
    )


@pytest.mark.parametrize(
    ("name", "fields", "message"), OPENAI_CASES, ids=[case[0] for case in OPENAI_CASES]
)
@pytest.mark.parametrize("endpoint", list(OPENAI_BODIES), ids=lambda endpoint: endpoint.name)
async def test_openai_refusals_come_before_vllms_serving_code(
    endpoint: OpenAIEndpoint, name: str, fields: dict[str, Any], message: str
) -> None:
    """vLLM's own request models read the body; the limits are checked on the body as sent
    and as read (`n: "1000000000"` is a number to vLLM), each in O(1)."""
    results = [
        await refusal_seconds(endpoint, {**OPENAI_BODIES[endpoint], **fields}) for _ in range(3)
    ]
    error, seconds = min(results, key=lambda result: result[1])
    assert error.message.startswith(message), error.message[:200]
    assert error.param == message.partition(":")[0]
    assert seconds * 1000 < SERVER_TIME_LIMIT_MS, f"{name}: refused after {seconds * 1000:.1f} ms"


FRONTEND_CASES = [case for case in OPENAI_CASES if case[0] not in ENGINE_CHECKED]


@pytest.mark.parametrize(
    ("name", "fields", "message"), FRONTEND_CASES, ids=[case[0] for case in FRONTEND_CASES]
)
@pytest.mark.parametrize("endpoint", list(OPENAI_BODIES), ids=lambda endpoint: endpoint.name)
@pytest.mark.parametrize("stream", [False, True])
def test_openai_refusals_are_the_frontends_before_admission(
    served: GrpcApp,
    endpoint: OpenAIEndpoint,
    stream: bool,
    name: str,
    fields: dict[str, Any],
    message: str,
) -> None:
    """Over HTTP, the frontend refuses the body as sent before the request is admitted (the
    model's OpenAI API never sees it), streaming or not, with the same reason as above."""
    path = OPENAI_PATHS[endpoint]
    content = json.dumps({**OPENAI_BODIES[endpoint], **fields, "stream": stream})
    engine = served.app.state.runtime.registry.get("fake").engine
    calls = len(engine.openai_serving.calls)

    def send() -> tuple[httpx.Response, float]:
        with access_times() as log:
            response = httpx.post(f"{served.http_url}/v1/{path}", content=content, timeout=60)
            return response, float(log.last(f"/v1/{path}")["total_ms"])

    response, server_ms = best_of_three(send)
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["message"].startswith(message) and error["param"] == message.partition(":")[0]
    assert server_ms < SERVER_TIME_LIMIT_MS, f"{name}: refused after {server_ms} ms"
    assert len(engine.openai_serving.calls) == calls


async def test_openai_prompt_batches_are_bounded() -> None:
    error, seconds = await refusal_seconds(OpenAIEndpoint.COMPLETIONS, {"prompt": ["x"] * MANY})
    assert error.message == f"prompt: {MANY} items are above this server's limit of 64"
    assert seconds * 1000 < SERVER_TIME_LIMIT_MS
    error, _ = await refusal_seconds(OpenAIEndpoint.COMPLETIONS, {"prompt": [[1, 2]] * 65})
    assert error.param == "prompt"


def test_openai_model_ids_are_bounded_before_they_are_looked_up(served: GrpcApp) -> None:
    with readiness_probe(served.http_url) as probe, access_times() as log:
        response = httpx.post(
            f"{served.http_url}/v1/completions", json={"model": "m/" * 50_000, "prompt": "Hi"}
        )
        server_ms = float(log.last("/v1/completions")["total_ms"])
    assert response.status_code == 400
    assert (
        response.json()["error"]["message"]
        == "model: a name of 100000 characters is longer than 256"
    )
    assert server_ms < SERVER_TIME_LIMIT_MS and probe.worst < PROBE_LIMIT_S


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "f"}}]
)
async def test_forced_tool_calls_are_grammars_and_bounded(tool_choice: Any) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"enum": [1] * MANY}}}]
    body = {
        **OPENAI_BODIES[OpenAIEndpoint.CHAT_COMPLETIONS],
        "tools": tools,
        "tool_choice": tool_choice,
    }
    error, _ = await refusal_seconds(OpenAIEndpoint.CHAT_COMPLETIONS, body)
    assert error.message == "tools: the grammar is over this server's limit of 65536 bytes"


MESSAGES = {"messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("request_class", "body", "limit", "bound"),
    [
        (CompletionRequest, {"prompt": "Hi"}, 2, 2),
        (CompletionRequest, {"prompt": "Hi", "max_tokens": None}, 2, 2),
        (CompletionRequest, {"prompt": "Hi"}, 32, 16),
        (CompletionRequest, {"prompt": "Hi"}, None, 16),
        (CompletionRequest, {"prompt": "Hi", "max_tokens": 1}, 2, 1),
        (CompletionRequest, {"prompt": "Hi", "max_output_tokens": 1}, 2, 2),
        (ChatCompletionRequest, MESSAGES, 2, 2),
        (ChatCompletionRequest, MESSAGES, None, None),
        (ChatCompletionRequest, {**MESSAGES, "max_completion_tokens": 1}, 2, 1),
        (ChatCompletionRequest, {**MESSAGES, "max_tokens": 1}, 2, 1),
        (ChatCompletionRequest, {**MESSAGES, "max_output_tokens": 1}, 2, 2),
        (ResponsesRequest, {"input": "Hi"}, 2, 2),
        (ResponsesRequest, {"input": "Hi", "max_tokens": 1}, 2, 2),
    ],
    ids=[
        "completions",
        "completions-null",
        "completions-limit-above-the-default",
        "completions-no-limit",
        "completions-bounded",
        "completions-another-routes-field",
        "chat",
        "chat-no-limit",
        "chat-bounded",
        "chat-bounded-by-its-deprecated-field",
        "chat-another-routes-field",
        "responses",
        "responses-another-routes-field",
    ],
)
def test_a_body_that_sets_no_bound_asks_vllms_default_within_the_limit(
    request_class: type[Any], body: dict[str, Any], limit: int | None, bound: int | None
) -> None:
    """MAX_TOKENS_LIMIT bounds what a request asks by default too: vLLM's default (16 for
    completions; the rest of the context for chat and responses) where it is lower, else the
    limit. Another route's field bounds nothing, so it does not count as a bound."""
    endpoints: dict[type[Any], OpenAIEndpoint] = {
        CompletionRequest: OpenAIEndpoint.COMPLETIONS,
        ChatCompletionRequest: OpenAIEndpoint.CHAT_COMPLETIONS,
        ResponsesRequest: OpenAIEndpoint.RESPONSES,
    }
    field = endpoints[request_class].max_tokens_field(body)
    guard = RequestGuard("r", RequestLimits(max_tokens=limit))
    model = ModelBounds(max_logprobs=20, context_length=2048, vocab_size=49_152)
    request = read_within_limits(request_class, {"model": "m", **body}, guard, model, field)
    assert request.model_dump()[field] == bound  # (chat's max_tokens warns when read)


def test_the_limited_values_are_read_without_copying_the_prompt() -> None:
    """The limit check reads a body's limited values as vLLM's request model holds them: a
    token-id prompt as large as the body limit allows is not copied per request, and chat's
    deprecated max_tokens is read without its warning (an error in this tier)."""
    completion = CompletionRequest(model="m", prompt=[[7] * 1000] * 4, max_tokens=5, n=2)
    values = values_of(completion, "max_tokens", bounded=True)
    assert values["prompt"] is completion.prompt
    assert (values["max_tokens"], values["n"]) == (5, 2)
    chat = ChatCompletionRequest(model="m", messages=[], max_tokens=9)
    assert values_of(chat, "max_tokens", bounded=True)["max_tokens"] == 9
    assert values_of(chat, "max_tokens", bounded=False)["max_tokens"] is None
