"""The OpenAI API's API keys, overload, timeouts and hostile input against the real engine, on a
server of its own: API_KEYS, MAX_PENDING_REQUESTS=2, REQUEST_TIMEOUT_SECONDS=3, MAX_N=4,
MAX_BEAM_SEARCH_POSITIONS=100000; and MAX_TOKENS_LIMIT on the session's limited server
(MAX_TOKENS_LIMIT=2)."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.support.openai_api import body_of, engine_unfinished, openai_error
from tests.support.probe import readiness_probe
from tests.support.servers import RunningServer, start_server

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODEL = "smollm2"
LONG = {"model": MODEL, "prompt": "Tell me a story", "max_tokens": 2000, "ignore_eos": True}


@pytest.fixture(scope="module")
def limited() -> Iterator[RunningServer]:
    env = {
        "API_KEYS": KEY,
        "MAX_PENDING_REQUESTS": "2",
        "REQUEST_TIMEOUT_SECONDS": "3",
        "MAX_N": "4",
        "MAX_BEAM_SEARCH_POSITIONS": "100000",
        "AUTH_OPEN_METRICS": "true",
    }
    server = start_server(name="openai-limits", env=env)
    yield server
    code, alive = server.stop(signal.SIGTERM)
    for process in alive:
        process.kill()
    assert code == 0 and not alive


def settle(base_url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while engine_unfinished(base_url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_unfinished(base_url) == 0


def test_api_key_as_bearer_with_the_sdk(limited: RunningServer) -> None:
    base = f"{limited.base_url}/v1"
    with (
        pytest.raises(openai.AuthenticationError) as refused,
        openai.OpenAI(base_url=base, api_key="wrong", max_retries=0) as wrong,
    ):
        wrong.models.list()
    assert (
        refused.value.status_code == 401 and body_of(refused.value)["type"] == "UnauthorizedError"
    )
    with openai.OpenAI(base_url=base, api_key=KEY, max_retries=0) as client:
        assert [m.id for m in client.models.list()] == [MODEL]
        stream = client.completions.create(model=MODEL, prompt="Hi", max_tokens=4, stream=True)
        assert len(list(stream)) == 4
    openai_error(httpx.post(f"{base}/chat/completions", json={"model": MODEL, "messages": []}), 401)


def test_overload_is_503_with_retry_after(limited: RunningServer) -> None:
    url = f"{limited.base_url}/v1/completions"
    started = threading.Barrier(3)

    def hold() -> None:
        with httpx.stream(
            "POST", url, json={**LONG, "stream": True}, headers=AUTH, timeout=30
        ) as response:
            lines = response.iter_lines()
            next(lines)
            started.wait()
            for _ in lines:
                pass

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for thread in holders:
        thread.start()
    started.wait()
    response = httpx.post(url, json={**LONG, "max_tokens": 2}, headers=AUTH)
    error = openai_error(response, 503)
    assert response.headers["retry-after"] == "1" and "overloaded" in error["message"]
    for thread in holders:
        thread.join()
    settle(limited.base_url)


def test_timeout_is_504_or_a_last_error_event(limited: RunningServer) -> None:
    url = f"{limited.base_url}/v1/completions"
    error = openai_error(httpx.post(url, json=LONG, headers=AUTH, timeout=30), 504)
    assert error["message"] == "Request timed out after 3 s and was aborted"
    settle(limited.base_url)
    response = httpx.post(url, json={**LONG, "stream": True}, headers=AUTH, timeout=30)
    frames = [part.removeprefix("data: ") for part in response.text.split("\n\n") if part]
    assert frames[-1] == "[DONE]" and json.loads(frames[-2])["error"]["code"] == 504
    assert len(frames) >= 3 and "choices" in json.loads(frames[0])  # text, then the error
    settle(limited.base_url)
    assert "Traceback" not in limited.log_path.read_text(errors="replace")


def test_a_response_past_the_timeout_ends_with_an_error_event(limited: RunningServer) -> None:
    url = f"{limited.base_url}/v1/responses"
    body = {"model": MODEL, "input": "Tell me a story", "max_output_tokens": 2000}
    long = {**body, "ignore_eos": True}
    assert openai_error(httpx.post(url, json=long, headers=AUTH, timeout=30), 504)["code"] == 504
    settle(limited.base_url)
    response = httpx.post(url, json={**long, "stream": True}, headers=AUTH, timeout=30)
    parts = [part.split("\n") for part in response.text.split("\n\n") if part]
    names = [name.removeprefix("event: ") for name, _ in parts]
    assert names[0] == "response.created" and "response.output_text.delta" in names
    assert names[-1] == "error" and "response.completed" not in names
    error = json.loads(parts[-1][1].removeprefix("data: "))
    assert error["code"] == "GatewayTimeoutError" and error["sequence_number"] == len(parts) - 1
    assert error["message"] == "Request timed out after 3 s and was aborted"
    settle(limited.base_url)


def test_max_output_tokens_is_bounded_by_the_limit(limited_server: RunningServer) -> None:
    """MAX_TOKENS_LIMIT=2: above it is a 400 naming the field; unset, the limit."""
    with openai.OpenAI(
        base_url=f"{limited_server.base_url}/v1", api_key="none", max_retries=0, timeout=120
    ) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model=MODEL, input="Hi", max_output_tokens=3)
        assert body_of(refused.value) == {
            "message": "max_output_tokens: 3 is above this server's limit of 2",
            "type": "BadRequestError",
            "param": "max_output_tokens",
            "code": 400,
        }
        answer = client.responses.create(
            model=MODEL, input="Tell me a story", extra_body={"ignore_eos": True}
        )
    assert answer.max_output_tokens == 2 and answer.usage is not None
    assert answer.usage.output_tokens == 2


def test_server_limits_name_the_field(limited: RunningServer) -> None:
    url = f"{limited.base_url}/v1/chat/completions"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "n": 5}
    assert openai_error(httpx.post(url, json=body, headers=AUTH), 400)["param"] == "n"


def test_a_beam_search_that_may_keep_too_much_is_refused_and_a_small_one_runs(
    limited: RunningServer, limited_server: RunningServer
) -> None:
    """vLLM keeps every beam that ended: 4 beams x 2,000 new tokens x (prompt + 2,000)
    positions go over MAX_BEAM_SEARCH_POSITIONS=100,000 (refused at once); 2 beams of 2
    tokens run (on the session's limited server, which has no request timeout)."""
    body = {"model": MODEL, "prompt": "Hi", "use_beam_search": True}
    refused = httpx.post(
        f"{limited.base_url}/v1/completions",
        json={**body, "n": 4, "max_tokens": 2000},
        headers=AUTH,
        timeout=60,
    )
    error = openai_error(refused, 400)
    assert error["param"] == "use_beam_search"
    assert "above this server's limit of 100,000" in error["message"]
    small = {**body, "n": 2, "max_tokens": 2}
    served = httpx.post(f"{limited_server.base_url}/v1/completions", json=small, timeout=600)
    assert served.status_code == 200, served.text
    assert [choice["index"] for choice in served.json()["choices"]] == [0, 1]
    settle(limited.base_url)


def test_request_ids_are_bounded_and_an_unsafe_header_is_not_vllms(limited: RunningServer) -> None:
    """vLLM names the request, and every chunk of its answer, by the body's request_id or the
    X-Request-Id header: a long id is refused naming it, an unsafe header is left out."""
    url = f"{limited.base_url}/v1/completions"
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 2}
    long_id = httpx.post(url, json={**body, "request_id": "x" * 300}, headers=AUTH, timeout=60)
    assert openai_error(long_id, 400)["param"] == "request_id"
    unsafe = "y" * 2000
    left_out = httpx.post(url, json=body, headers={**AUTH, "X-Request-Id": unsafe}, timeout=60)
    assert left_out.status_code == 200 and unsafe not in left_out.text
    named = httpx.post(url, json=body, headers={**AUTH, "X-Request-Id": "client-7"}, timeout=60)
    assert named.json()["id"] == "cmpl-client-7"


PROBE_LIMIT_S = 2.0
"""The slowest readiness probe while a conversation is read (the unbounded Responses body
of 200,000 input items held the event loop 12 s here)."""


def test_conversations_are_bounded_and_the_largest_keeps_the_server_answering(
    limited: RunningServer,
) -> None:
    """vLLM's request models read each message and content part on the event loop: more
    messages, content parts or tools than the server's limits are refused before they do,
    naming the field, and the largest conversations allowed are read while the server goes
    on answering."""
    text = {"role": "user", "content": "a"}
    tool = {"type": "function", "function": {"name": "f"}}
    chat_parts = [{"type": "text", "text": "a"}] * 2
    input_parts = [{"type": "input_text", "text": "a"}] * 2
    refused: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/chat/completions", {"messages": [text] * 200_000}, "messages"),
        ("/v1/responses", {"input": [text] * 200_000}, "input"),
        ("/tokenize", {"messages": [text] * 200_000}, "messages"),
        (
            "/v1/chat/completions",
            {"messages": [{**text, "content": chat_parts * 2049}]},
            "messages[0].content",
        ),
        ("/v1/chat/completions", {"messages": [text], "tools": [tool] * 129}, "tools"),
    ]
    largest: list[tuple[str, dict[str, Any]]] = [
        ("/v1/chat/completions", {"messages": [{**text, "content": chat_parts}] * 2048}),
        ("/v1/responses", {"input": [{**text, "content": input_parts}] * 2048}),
    ]
    with (
        readiness_probe(limited.base_url) as probe,
        httpx.Client(headers=AUTH, timeout=120) as http,
    ):
        for path, body, field in refused:
            response = http.post(f"{limited.base_url}{path}", json={"model": MODEL, **body})
            assert openai_error(response, 400)["param"] == field, response.text[:300]
        for path, body in largest:
            response = http.post(f"{limited.base_url}{path}", json={"model": MODEL, **body})
            assert "maximum context length" in openai_error(response, 400)["message"]
    assert not probe.failures and probe.worst < PROBE_LIMIT_S, (probe.worst, probe.failures[:3])
    settle(limited.base_url)
    assert not engine_unfinished(limited.base_url)


def short(body: object) -> None:
    """At most 8 new tokens per generated body, so that each one answers in well under the
    timeout (whose 504 is the server's policy, not a failure)."""
    if not isinstance(body, dict):
        return
    keys = ("max_tokens", "max_completion_tokens", "max_output_tokens")
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 8:
            body[key] = 8
    if not any(key in body for key in keys):
        body["max_output_tokens" if "input" in body else "max_tokens"] = 8


def test_schemathesis_over_the_v1_operations(limited: RunningServer) -> None:
    """Generated bodies, valid and not, against vLLM's own request models: never a 5xx (but
    the timeout's 504), every error in OpenAI's shape, and no engine request left behind."""
    schema = schemathesis.openapi.from_url(f"{limited.base_url}/openapi.json").include(
        path_regex="^/v1/"
    )
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    assert len(operations) == 5
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,
        )
        def check(case) -> None:
            short(case.body)
            response = case.call(base_url=limited.base_url, headers=AUTH, timeout=30)
            assert response.status_code < 500 or response.status_code == 504, response.text
            case.validate_response(
                response, checks=[content_type_conformance, response_schema_conformance]
            )
            if response.status_code >= 400:
                body = response.json()
                assert set(body) == {"error"} and set(body["error"]) == {
                    "message",
                    "type",
                    "param",
                    "code",
                }

        check()
    settle(limited.base_url)
    assert httpx.get(f"{limited.base_url}/v2/health/ready").status_code == 200
