"""The real engine behind every protocol: requests far above a limit are refused in well under
100 ms of server time while a readiness probe keeps answering, and grammars the engine cannot
use are 400s (gRPC INVALID_ARGUMENT) with the compiler's reason on every route, streaming or
not; the engine is left with no request."""

from __future__ import annotations

import json
import queue
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import tritonclient.grpc as triton_grpc

from tests.support.probe import readiness_probe
from tests.support.servers import RunningServer, tracebacks_of_ours
from tests.support.triton_grpc import bool_input, bytes_input
from tests.support.waiting import wait_until

SERVER_TIME_LIMIT_MS = 1000
"""A refusal reads the body (1.4 MB of choices: 116 ms on a host twice as slow as a quiet
2-core one), never compiles it (127 s for the 100,000 choices before they were bounded)."""
PROBE_LIMIT_S = 2.0
MANY = 50_000
OBJECT = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def limited(limited_server: RunningServer) -> Iterator[RunningServer]:
    """The session's limited server (MAX_TOKENS_LIMIT=2, and the default MAX_N 16)."""
    yield limited_server
    assert not tracebacks_of_ours(limited_server), limited_server.log_tail(80)


@pytest.fixture(scope="module")
def http(limited: RunningServer) -> Iterator[httpx.Client]:
    """A client of the server, once each route has served a request (a route's first request
    loads what it needs, e.g. the chat template: not time the request chooses)."""
    with httpx.Client(base_url=limited.base_url, timeout=120) as client:
        chat = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 2,
        }
        assert client.post("/v1/chat/completions", json=chat).status_code == 200
        assert (
            client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2}).status_code
            == 200
        )
        yield client


def server_ms(server: RunningServer, request_id: str) -> float:
    """The request's total_ms from the server's access log (written as its response ends)."""
    pattern = re.compile(rf"request_id={re.escape(request_id)} .*total_ms=([\d.]+)")

    def found() -> re.Match[str] | None:
        return pattern.search(server.log_path.read_text(errors="replace"))

    wait_until(lambda: found() is not None, timeout=10)
    match = found()
    assert match is not None
    return float(match.group(1))


def triton_http(
    http: httpx.Client, route: str, parameters: dict[str, Any]
) -> tuple[httpx.Response, str]:
    request_id = uuid.uuid4().hex
    body = {"text_input": "Hi", "parameters": parameters}
    response = http.post(
        f"/v2/models/smollm2/{route}", json=body, headers={"x-request-id": request_id}
    )
    return response, request_id


def grpc_stream(
    server: RunningServer, parameters: dict[str, Any], stream: bool = False
) -> tuple[Any, Any, str]:
    """One ModelStreamInfer request: (result, error, request id)."""
    request_id = uuid.uuid4().hex
    inputs = [
        bytes_input("text_input", ["Hi"]),
        bool_input("stream", stream),
        bytes_input("sampling_parameters", [json.dumps(parameters)]),
    ]
    if stream:
        inputs.append(bool_input("exclude_input_in_output", True))
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with triton_grpc.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(lambda result, error: received.put((result, error)))
        client.async_stream_infer(model_name="smollm2", inputs=inputs, request_id=request_id)
        client.stop_stream()
    result, error = received.get(timeout=60)
    return result, error, request_id


def openai(http: httpx.Client, path: str, body: dict[str, Any]) -> tuple[httpx.Response, str]:
    request_id = uuid.uuid4().hex
    return http.post(f"/v1/{path}", json=body, headers={"x-request-id": request_id}), request_id


FAR_ABOVE: list[tuple[str, dict[str, Any], str]] = [
    (
        "n",
        {"n": 1_000_000_000, "max_tokens": 2},
        "n: 1000000000 is above this server's limit of 16",
    ),
    (
        "n_1.5e9",
        {"n": 1_500_000_000, "max_tokens": 2},
        "n: 1500000000 is above this server's limit of 16",
    ),
    (
        "max_tokens",
        {"max_tokens": 2**31 - 1},
        "max_tokens: 2147483647 is above this server's limit of 2",
    ),
    ("stop", {"stop": ["x"] * MANY}, f"stop: {MANY} stop strings and bad words are above"),
    (
        "allowed_token_ids",
        {"allowed_token_ids": [1] * MANY},
        f"allowed_token_ids: {MANY} items are above",
    ),
    (
        "bad_words_bytes",
        {"bad_words": ["x" * 3_000_000]},
        "bad_words: stop strings and bad words are over this server's limit of 16384 bytes",
    ),
    (
        "repetition_detection",
        {"repetition_detection": {"max_pattern_size": 10**9, "min_count": 2}},
        "repetition_detection.max_pattern_size: 1000000000 is above this server's limit of 256",
    ),
    (
        "choice",
        {"structured_outputs": {"choice": [f"option {i}" for i in range(100_000)]}},
        "structured_outputs: the grammar is over this server's limit of 65536 bytes",
    ),
]
ENGINE_LIMITS: list[tuple[str, dict[str, Any], str]] = [
    ("logprobs", {"logprobs": 1_000_000_000}, "greater than max allowed: 20")
]
"""Checked by vLLM itself (the model's max_logprobs) before the engine takes the request."""


@pytest.mark.parametrize(
    ("name", "fields", "message"), FAR_ABOVE + ENGINE_LIMITS, ids=lambda v: str(v)[:20]
)
def test_far_above_a_limit_is_refused_at_once_on_every_protocol(
    limited: RunningServer, http: httpx.Client, name: str, fields: dict[str, Any], message: str
) -> None:
    timings: dict[str, float] = {}
    with readiness_probe(limited.base_url) as probe:
        for route in ("generate", "generate_stream"):
            response, request_id = triton_http(
                http, route, {**fields, "max_tokens": fields.get("max_tokens", 2)}
            )
            assert response.status_code == 400 and message in response.json()["error"], (
                response.text[:300]
            )
            timings[route] = server_ms(limited, request_id)
        result, error, request_id = grpc_stream(limited, fields)
        assert result is None and message in error.message(), error
        timings["grpc"] = server_ms(limited, request_id)
        chat_fields = (
            {"logprobs": True, "top_logprobs": fields["logprobs"]} if name == "logprobs" else fields
        )
        for path, body in [
            ("completions", {"prompt": "Hi", **fields}),
            ("chat/completions", {"messages": [{"role": "user", "content": "Hi"}], **chat_fields}),
        ]:
            for stream in (False, True):
                response, request_id = openai(
                    http, path, {"model": "smollm2", **body, "stream": stream}
                )
                assert response.status_code == 400, response.text[:300]
                if name != "logprobs":  # vLLM's own wording otherwise
                    assert message in response.json()["error"]["message"], response.text[:300]
                timings[f"{path}{' stream' if stream else ''}"] = server_ms(limited, request_id)
    print(f"\n{name}: server ms {timings}; readiness probe worst {probe.worst * 1000:.1f} ms")
    assert all(ms < SERVER_TIME_LIMIT_MS for ms in timings.values()), timings
    assert not probe.failures and probe.worst < PROBE_LIMIT_S, (probe.worst, probe.failures[:3])


GRAMMARS = [
    (
        "min_items",
        {"json": {"type": "array", "minItems": 100000}},
        "minItems is greater than the number of prefixItems",
    ),
    (
        "self_reference",
        {"json": {"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/a"}}}},
        "the grammar matches no text",
    ),
    ("left_recursion", {"grammar": "root ::= root"}, "the grammar matches no text"),
    (
        "min_properties",
        {"json": {"type": "object", "minProperties": 3}},
        "minProperties is greater than the number",
    ),
    (
        "pattern_properties",
        {"json": {"type": "object", "patternProperties": {"(": {"type": "string"}}}},
        "Regex parsing error at position 2",
    ),
    (
        "allowed_token_ids",
        {"json": {"type": "integer"}, "allowed_token_ids": [1]},
        "none of these tokens can start the text the grammar allows",
    ),
]


def split(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(structured_outputs, other sampling fields) of a case."""
    structured = {k: v for k, v in case.items() if k != "allowed_token_ids"}
    return structured, {k: v for k, v in case.items() if k == "allowed_token_ids"}


@pytest.fixture(scope="module")
def xgrammar_engine(http: httpx.Client) -> None:
    """A plain schema first, as a server usually sees: the engine core compiles with xgrammar
    from then on (vLLM keeps the backend of the first grammar it compiles)."""
    body = {
        "text_input": "City?",
        "parameters": {"max_tokens": 2, "structured_outputs": {"json": OBJECT}},
    }
    assert http.post("/v2/models/smollm2/generate", json=body).status_code == 200


@pytest.mark.parametrize(("name", "case", "reason"), GRAMMARS, ids=[g[0] for g in GRAMMARS])
def test_grammars_the_engine_cannot_use_are_400s_with_the_reason_everywhere(
    limited: RunningServer,
    http: httpx.Client,
    xgrammar_engine: None,
    name: str,
    case: dict[str, Any],
    reason: str,
) -> None:
    structured, extra = split(case)
    field = "allowed_token_ids" if extra else "structured_outputs"
    parameters = {"max_tokens": 2, "structured_outputs": structured, **extra}
    for route in ("generate", "generate_stream"):
        response, _ = triton_http(http, route, parameters)
        assert response.status_code == 400, (route, response.text[:300])
        assert (
            response.json()["error"].startswith(f"parameters.{field}: ")
            and reason in response.json()["error"]
        )
    for stream in (False, True):
        result, error, _ = grpc_stream(limited, parameters, stream)
        assert result is None and error.message().startswith(f"parameters.{field}: "), error
        assert reason in error.message()
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("completions", {"prompt": "Hi"}),
        ("chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
    ]
    for path, body in bodies:
        for stream in (False, True):
            payload = {
                "model": "smollm2",
                **body,
                "max_tokens": 2,
                "structured_outputs": structured,
                **extra,
            }
            response, _ = openai(http, path, {**payload, "stream": stream})
            assert response.status_code == 400, (path, stream, response.text[:300])
            error = response.json()["error"]
            assert (
                error["param"] == field
                and error["message"].startswith(f"{field}: ")
                and reason in error["message"]
            )
    wait_until(lambda: engine_requests(http) == 0)
    assert http.get("/v2/health/ready").status_code == 200


def test_a_prompt_too_long_once_templated_is_the_clients_400(
    limited: RunningServer, http: httpx.Client
) -> None:
    text = "hi " * 2040
    body = {"text_input": text, "parameters": {"max_tokens": 2, "apply_chat_template": True}}
    response = http.post("/v2/models/smollm2/generate", json=body)
    assert response.status_code == 400 and "maximum" in response.json()["error"], response.text[
        :300
    ]
    parameters = {"max_tokens": 2, "apply_chat_template": True}
    request_id = uuid.uuid4().hex
    inputs = [
        bytes_input("text_input", [text]),
        bytes_input("sampling_parameters", [json.dumps(parameters)]),
    ]
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with triton_grpc.InferenceServerClient(limited.grpc_url) as client:
        client.start_stream(lambda result, error: received.put((result, error)))
        client.async_stream_infer(model_name="smollm2", inputs=inputs, request_id=request_id)
        client.stop_stream()
    result, error = received.get(timeout=60)
    assert result is None and "maximum" in error.message()
    chat = {"model": "smollm2", "messages": [{"role": "user", "content": text}], "max_tokens": 2}
    response = http.post("/v1/chat/completions", json=chat)
    assert response.status_code == 400, response.text[:300]


ENGINE_REFUSALS = [
    ("allowed_token_ids", {"allowed_token_ids": [60_000]}, "out-of-vocab token id"),
    ("thinking_token_budget", {"thinking_token_budget": 10}, "reasoning_config is not configured"),
]
"""Refused by the engine as it takes the request (after the server's own checks)."""


@pytest.mark.parametrize(("name", "fields", "reason"), ENGINE_REFUSALS, ids=lambda v: str(v)[:20])
def test_what_the_engine_refuses_is_a_400_streamed_or_not(
    http: httpx.Client, name: str, fields: dict[str, Any], reason: str
) -> None:
    """The same status and text as unstreamed: no 200 whose stream then carries the error."""
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("completions", {"prompt": "Hi"}),
        ("chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
    ]
    for path, body in bodies:
        for stream in (False, True):
            payload = {"model": "smollm2", **body, "max_tokens": 2, **fields, "stream": stream}
            response, _ = openai(http, path, payload)
            assert response.status_code == 400, (path, stream, response.text[:300])
            assert reason in response.json()["error"]["message"]
    if name == "allowed_token_ids":
        for route in ("generate", "generate_stream"):
            response, _ = triton_http(http, route, {"max_tokens": 2, **fields})
            assert response.status_code == 400 and reason in response.json()["error"]
    wait_until(lambda: engine_requests(http) == 0)


SURROGATES: list[tuple[str, dict[str, Any], str]] = [
    ("completions", {"prompt": "Hi", "stop": "\ud800"}, "stop"),
    ("completions", {"prompt": "Hi \udfff"}, "prompt"),
    (
        "chat/completions",
        {"messages": [{"role": "user", "content": "\ud800"}]},
        "messages[0].content",
    ),
]


@pytest.mark.parametrize(("path", "body", "field"), SURROGATES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_lone_surrogate_is_a_400_naming_the_field_and_leaves_nothing_behind(
    http: httpx.Client, path: str, body: dict[str, Any], field: str, stream: bool
) -> None:
    """JSON may spell a lone surrogate (`"\\ud800"`), which no UTF-8 can carry: once a 500
    that left its request in the engine client for good."""
    payload = {"model": "smollm2", "max_tokens": 2, **body, "stream": stream}
    content = json.dumps(payload)  # ensure_ascii: the escape as a client sends it
    response = http.post(
        f"/v1/{path}", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["param"] == field and "a lone surrogate" in error["message"]
    triton = http.post(
        "/v2/models/smollm2/generate",
        content=json.dumps({"text_input": "Hi", "parameters": {"stop": ["\ud800"]}}),
    )
    assert triton.status_code == 400
    wait_until(lambda: engine_requests(http) == 0 and unfinished_requests(http) == 0)


def unfinished_requests(http: httpx.Client) -> float:
    """Requests the server's engine clients still hold, by their own count."""
    text = http.get("/metrics").text
    values = re.findall(
        r"^server_engine_requests_unfinished\{[^}]*\} ([\d.e+]+)$", text, re.MULTILINE
    )
    return sum(float(v) for v in values)


def engine_requests(http: httpx.Client) -> float:
    """Requests the engine holds (running or waiting), from vLLM's own gauges."""
    text = http.get("/metrics").text
    values = re.findall(
        r"^vllm:num_requests_(?:running|waiting)\{[^}]*\} ([\d.e+]+)$", text, re.MULTILINE
    )
    return sum(float(v) for v in values)


def test_the_engine_keeps_serving(http: httpx.Client) -> None:
    started = time.perf_counter()
    response = http.post(
        "/v2/models/smollm2/generate", json={"text_input": "Hi", "parameters": {"max_tokens": 2}}
    )
    assert response.status_code == 200 and time.perf_counter() - started < 60
    assert engine_requests(http) == 0
