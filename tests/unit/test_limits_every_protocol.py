"""One table of over-limit values, each sent on every protocol that generates: Triton's
generate and generate_stream (SSE), Triton gRPC's stream (streaming or not), and OpenAI's
completions and chat completions (streaming or not). Each is refused before admission
(400; on the gRPC stream, an error message in the stream), names the same field, and gives
the same reason: the limits are one table (app/core/limits.py) read once per request,
whatever the protocol.

How fast each refusal is, and that a probe keeps answering meanwhile, is in
test_request_limits.py and test_openai_request_limits.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import tritonclient.grpc as triton_grpc

from tests.support.triton_grpc import GrpcApp, bool_input, bytes_input, stream_results
from tests.unit.test_request_limits import served

__all__ = ["served"]

MANY = 10_000
"""List entries above every list limit of the server in test_request_limits.py (64 stop
strings and bad words, 1000 token ids)."""


@dataclass(frozen=True)
class OverLimit:
    """Sampling fields over one limit; the field the refusal names and how its reason
    begins (the rest of the reason must be the same on every protocol too)."""

    name: str
    fields: dict[str, Any]
    field: str
    reason: str


TABLE = [
    OverLimit("n", {"n": 1_000_000_000}, "n", "1000000000 is above this server's limit of 16"),
    OverLimit(
        "max_tokens",
        {"max_tokens": 2**31 - 1},
        "max_tokens",
        "2147483647 is above this server's limit of 16",
    ),
    OverLimit("stop", {"stop": ["x"] * 65}, "stop", "65 stop strings and bad words"),
    OverLimit("bad_words", {"bad_words": ["x"] * MANY}, "bad_words", f"{MANY} stop strings"),
    OverLimit(
        "stop_bytes",
        {"stop": "x" * 20_000},
        "stop",
        "stop strings and bad words are over this server's limit of 16384",
    ),
    OverLimit(
        "bad_words_bytes",
        {"bad_words": ["x" * 20_000]},
        "bad_words",
        "stop strings and bad words are over this server's limit of 16384",
    ),
    OverLimit("stop_token_ids", {"stop_token_ids": [1] * MANY}, "stop_token_ids", f"{MANY}"),
    OverLimit(
        "allowed_token_ids",
        {"allowed_token_ids": list(range(MANY))},
        "allowed_token_ids",
        f"{MANY}",
    ),
    OverLimit(
        "logit_bias", {"logit_bias": {str(i): 1.0 for i in range(MANY)}}, "logit_bias", f"{MANY}"
    ),
    OverLimit(
        "repetition_detection",
        {"repetition_detection": {"max_pattern_size": 10**9, "min_count": 2}},
        "repetition_detection.max_pattern_size",
        "1000000000 is above this server's limit of 256",
    ),
    OverLimit(
        "grammar",
        {"structured_outputs": {"choice": [f"option {i}" for i in range(MANY)]}},
        "structured_outputs",
        "the grammar is over this server's limit of 65536 bytes",
    ),
]

Refusal = tuple[str, str]
"""The field a refusal names, and its reason."""


def split_refusal(message: str, field_prefix: str = "") -> Refusal:
    """`<prefix><field>: <reason>` as (field, reason)."""
    named, _, reason = message.partition(": ")
    assert named.startswith(field_prefix), message[:300]
    return named.removeprefix(field_prefix), reason


def triton_http(route: str) -> Callable[[GrpcApp, dict[str, Any]], Refusal]:
    def send(served: GrpcApp, fields: dict[str, Any]) -> Refusal:
        body = {"text_input": "Hi", "parameters": fields}
        response = httpx.post(f"{served.http_url}/v2/models/fake/{route}", json=body, timeout=60)
        assert response.status_code == 400, response.text[:300]
        return split_refusal(response.json()["error"], "parameters.")

    return send


def triton_grpc_stream(stream: bool) -> Callable[[GrpcApp, dict[str, Any]], Refusal]:
    def send(served: GrpcApp, fields: dict[str, Any]) -> Refusal:
        inputs = [
            bytes_input("text_input", ["Hi"]),
            bool_input("stream", stream),
            bytes_input("sampling_parameters", [json.dumps(fields)]),
        ]
        with triton_grpc.InferenceServerClient(served.grpc_url) as client:
            [(result, error)] = stream_results(client, [{"model_name": "fake", "inputs": inputs}])
        assert result is None and error is not None
        return split_refusal(error.message(), "parameters.")

    return send


def openai(path: str, stream: bool) -> Callable[[GrpcApp, dict[str, Any]], Refusal]:
    def send(served: GrpcApp, fields: dict[str, Any]) -> Refusal:
        prompt: dict[str, Any] = (
            {"messages": [{"role": "user", "content": "Hi"}]}
            if path == "chat/completions"
            else {"prompt": "Hi"}
        )
        body = {"model": "fake", **prompt, **fields, "stream": stream}
        response = httpx.post(f"{served.http_url}/v1/{path}", json=body, timeout=60)
        assert response.status_code == 400, response.text[:300]
        error = response.json()["error"]
        field, reason = split_refusal(error["message"])
        assert error["param"] == field
        return field, reason

    return send


PROTOCOLS: dict[str, Callable[[GrpcApp, dict[str, Any]], Refusal]] = {
    "triton generate": triton_http("generate"),
    "triton generate_stream (SSE)": triton_http("generate_stream"),
    "triton gRPC stream": triton_grpc_stream(stream=False),
    "triton gRPC stream, streaming": triton_grpc_stream(stream=True),
    "openai completions": openai("completions", stream=False),
    "openai completions, streaming": openai("completions", stream=True),
    "openai chat completions": openai("chat/completions", stream=False),
    "openai chat completions, streaming": openai("chat/completions", stream=True),
}


@pytest.mark.parametrize("case", TABLE, ids=[case.name for case in TABLE])
def test_an_over_limit_value_is_refused_alike_on_every_protocol(
    served: GrpcApp, case: OverLimit
) -> None:
    engine = served.app.state.runtime.registry.get("fake").engine
    generated, served_openai = len(engine.requests), len(engine.openai_serving.calls)
    refusals = {name: send(served, case.fields) for name, send in PROTOCOLS.items()}
    fields = {name: field for name, (field, _) in refusals.items()}
    reasons = {name: reason for name, (_, reason) in refusals.items()}
    assert set(fields.values()) == {case.field}, fields
    assert len(set(reasons.values())) == 1, reasons
    assert next(iter(reasons.values())).startswith(case.reason), reasons
    assert (len(engine.requests), len(engine.openai_serving.calls)) == (generated, served_openai)
