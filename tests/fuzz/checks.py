"""What every answer of the fuzz tier is checked for, shared by its tests."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import grpc
import httpx
import requests

from tests.fuzz.bodies import Request
from tests.fuzz.grpc_requests import Draw
from tests.fuzz.mixing import RESPONSES
from tests.fuzz.report import REPORT

FINAL = "triton_final_response"


def without_binary(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: without_binary(v) for k, v in schema.items() if not (k == "format" and v == "binary")
        }
    if isinstance(schema, list):
        return [without_binary(item) for item in schema]
    return schema


def content_type(response: Any) -> str:
    """A response's content type (`requests`' headers, or schemathesis's lists of values)."""
    value = response.headers.get("content-type") or response.headers.get("Content-Type") or ""
    return value[0] if isinstance(value, list) else value


def error_shape_holds(path: str, response: Any) -> bool:
    """Errors are `{"error": "..."}` (Triton, KServe) or `{"error": {...}}` (OpenAI)."""
    if response.status_code < 400 or "json" not in content_type(response):
        return True
    body = response.json()
    if path.startswith("/v1/") or path in ("/tokenize", "/detokenize"):
        return isinstance(body.get("error"), dict) and bool(body["error"].get("message"))
    return isinstance(body.get("error"), str) and bool(body["error"])


def stream_statuses(http_url: str) -> dict[str, float]:
    """grpc_server_stream_requests_total and grpc_server_handled_total by code."""
    text = httpx.get(f"{http_url}/metrics", timeout=30).text
    found: dict[str, float] = {}
    pattern = (
        r'^(grpc_server_(?:stream_requests|handled)_total)\{[^}]*grpc_code="(\w+)"'
        r"[^}]*\} ([\d.e+]+)$"
    )
    for metric, code, value in re.findall(pattern, text, re.MULTILINE):
        found[f"{metric}:{code}"] = found.get(f"{metric}:{code}", 0) + float(value)
    return found


def stream_error(text: str) -> str | None:
    """The first event of an event stream that is an error (Triton's `{"error": "..."}`,
    OpenAI's `{"error": {...}}` or `{"object": "error"}`, the Responses API's
    `{"type": "error"}`), as sent."""
    for line in text.splitlines():
        data = line.removeprefix("data:").strip()
        if not line.startswith("data:") or not data.startswith("{"):
            continue
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if isinstance(event, dict) and (
            "error" in event or "error" in (event.get("object"), event.get("type"))
        ):
            return data
    return None


def outcome(response: requests.Response) -> str:
    """The kind of answer: its status class, and whether a stream's events hold an error."""
    kind = f"{response.status_code // 100}xx"
    streamed = "text/event-stream" in content_type(response)
    if response.status_code < 300 and streamed and stream_error(response.text):
        kind += " with an error event"
    return kind


def send(
    session: requests.Session, base: str, request: Request, prefix: str, slow: float
) -> requests.Response:
    """Send `request`, count its answer under `prefix` + its route and under its family;
    fail on a 5xx, an answer slower than `slow`, an error out of its protocol's shape, a
    request that must be refused (a lone surrogate) and was not, with a 400, a refusal that
    does not name the field it must, or a Responses API stream out of its rules."""
    started = time.perf_counter()
    response = session.request(
        request.method, request.url(base), timeout=2 * slow, **request.arguments()
    )
    seconds = time.perf_counter() - started
    REPORT.record(prefix + request.route, response.status_code, seconds, slow, request.family)
    assert error_shape_holds(request.path, response), (response.status_code, response.text[:300])
    if request.refused:
        assert response.status_code == 400, (request, response.status_code, response.text[:300])
    if request.names is not None:
        assert 400 <= response.status_code < 500, (request, response.status_code)
        named = response.json()["error"]["param"]
        assert named == request.names, (request, response.status_code, response.text[:300])
    if request.route == RESPONSES and "text/event-stream" in content_type(response):
        broken = responses_stream_problem(response.text)
        assert broken is None, (broken, request, response.text[-600:])
    return response


def send_for_missing(
    session: requests.Session, base: str, request: Request, prefix: str, slow: float
) -> None:
    """Send `request` to a route of something that does not exist: a 404 (naming the field
    `request.names`)."""
    response = send(session, base, request, prefix, slow)
    assert response.status_code == 404, (request, response.status_code, response.text[:300])


RESPONSE_ENDS = ("response.completed", "error")
ERROR_EVENT = {"type", "code", "message", "param", "sequence_number"}


def responses_stream_problem(text: str) -> str | None:
    """How a Responses API stream breaks its rules, or None: each event an `event: <type>`
    line and a `data:` line of that type, sequence numbers 0..n-1, no `data: [DONE]`, the
    last event `response.completed` or an `error` event of OpenAI's shape."""
    frames = [frame for frame in text.split("\n\n") if frame]
    events = []
    for index, frame in enumerate(frames):
        kind, _, data = frame.partition("\n")
        try:
            event = json.loads(data.removeprefix("data: "))
        except ValueError:
            event = None
        if not isinstance(event, dict):
            return f"event {index} has no JSON object for data: {frame[:300]!r}"
        if kind != f"event: {event.get('type')}" or not data.startswith("data: "):
            return f"event {index} is not named by its type: {frame[:300]!r}"
        if event.get("sequence_number") != index:
            return f"event {index} has sequence number {event.get('sequence_number')}"
        events.append(event)
    if not events or events[-1]["type"] not in RESPONSE_ENDS:
        return f"the stream ends with {frames[-1][:300] if frames else 'nothing'!r}"
    if events[-1]["type"] == "error" and set(events[-1]) != ERROR_EVENT:
        return f"the error event is not OpenAI's: {frames[-1][:300]!r}"
    return None


def send_with_twin(
    session: requests.Session, base: str, request: Request, prefix: str, slow: float
) -> None:
    """Send `request`, and its twin if it has one: the same body in the other streaming mode,
    whose answer must be of the same kind (a 400 is a 400 both ways, not a 200 whose stream
    ends in an error event); a mismatch is counted in the report, and fails."""
    response = send(session, base, request, prefix, slow)
    if request.twin is None:
        return
    twin = send(session, base, request.twin, prefix, slow)
    mismatch = None
    if outcome(response) != outcome(twin):
        mismatch = (
            f"{prefix}{request.route}: {outcome(response)} {response.text[:200]!r}; its twin "
            f"{request.twin.route}: {outcome(twin)} {twin.text[:200]!r}; {request!r}"
        )
    REPORT.parity(mismatch)
    assert mismatch is None, mismatch


def stream_infer(stub: Any, draw: Draw, route: str, slow: float, max_bytes: int) -> None:
    """One ModelStreamInfer call of `draw`'s message, counted under `route` and its family:
    it gets its responses (an error among them if it must be refused) and a final response,
    or, for a message over the server's `max_bytes`, RESOURCE_EXHAUSTED."""
    started = time.perf_counter()
    try:
        responses = list(stub.ModelStreamInfer(iter([draw.message]), timeout=2 * slow))
    except grpc.RpcError as error:
        code = error.code().name
        REPORT.record(route, code, time.perf_counter() - started, slow, draw.family)
        assert code == "RESOURCE_EXHAUSTED" and draw.message.ByteSize() > max_bytes, (code, draw)
        return
    refused = any(response.error_message for response in responses)
    seconds = time.perf_counter() - started
    REPORT.record(route, "error" if refused else "OK", seconds, slow, draw.family)
    assert responses, "every request gets a response"
    last = responses[-1]
    assert last.infer_response.parameters[FINAL].bool_param, last
    assert all(r.infer_response.id == draw.message.id for r in responses)
    assert refused or not draw.refused, (draw, responses[0])
