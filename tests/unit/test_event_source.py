"""GET `generate_stream` for browsers' EventSource, with the engine double: query parsing, the
same validation as POST, named `end`/`error` events, versions, abort on disconnect."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.errors import ServerError
from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.access_log import access_fields
from tests.support.asgi import call_and_disconnect
from tests.support.repository import write_model
from tests.support.sse import named_events
from tests.support.waiting import eventually

STREAM = "/v2/models/fake/generate_stream"
EVENT_SOURCE = {"accept": "text/event-stream"}


def test_get_streams_the_post_events_then_end(client: TestClient) -> None:
    body = {"text_input": "x", "parameters": {"max_tokens": 4}, "return_finish_reason": True}
    posted = client.post(STREAM, json=body)
    got = client.get(
        STREAM, params={"text_input": "x", "max_tokens": 4, "return_finish_reason": "true"}
    )
    assert got.status_code == 200
    events = named_events(got)
    assert events[-1] == ("end", {})
    assert events[:-1] == [("message", e) for _, e in named_events(posted)]
    assert [e["text_output"] for _, e in events[:-1]] == ["Hello", " from", " the", " fake"]


def test_query_values_are_typed_by_the_body_schema(client: TestClient, engine: FakeEngine) -> None:
    query = (
        ("text_input", "12"),
        ("max_tokens", "3"),
        ("temperature", "0.5"),
        ("ignore_eos", "true"),
        ("stop", "a"),
        ("stop", "b"),
        ("stop_token_ids", "7"),
        ("seed", "-3"),
        ("return_num_output_tokens", "1"),
    )
    events = named_events(client.get(STREAM, params=query))
    assert [e.get("num_output_tokens") for _, e in events] == [1, 1, 1, None]
    request = engine.requests[-1]
    assert request.prompt == "12"
    params = request.sampling_params
    assert (params.max_tokens, params.temperature, params.ignore_eos, params.seed) == (
        3,
        0.5,
        True,
        -3,
    )
    assert params.stop == ["a", "b"] and params.stop_token_ids == [7]


def test_a_single_stop_stays_a_string(client: TestClient, engine: FakeEngine) -> None:
    client.get(STREAM, params={"text_input": "x", "stop": "[1]", "max_tokens": 1})
    assert engine.requests[-1].sampling_params.stop == ["[1]"]  # vLLM's own list of one


def test_sampling_parameters_json_in_the_query(client: TestClient, engine: FakeEngine) -> None:
    sampling = json.dumps({"max_tokens": 2, "stop": ["x", "y"]})
    events = named_events(
        client.get(STREAM, params={"text_input": "x", "sampling_parameters": sampling})
    )
    assert len(events) == 3 and engine.requests[-1].sampling_params.stop == ["x", "y"]


@pytest.mark.parametrize(
    ("query", "body"),
    [
        ({"max_tokens": "0"}, {"max_tokens": 0}),
        ({"temperature": "-1"}, {"temperature": -1}),
        ({"top_p": "nan"}, {"top_p": "nan"}),
        ({"exclude_input_in_output": "false"}, {"exclude_input_in_output": False}),
        ({"sampling_parameters": "[1]"}, {"sampling_parameters": "[1]"}),
        ({"sampling_parameters": "{nope"}, {"sampling_parameters": "{nope"}),
        ({"max_tokens": "4096"}, {"max_tokens": 4096}),
        ({"lora_name": "a"}, {"lora_name": "a"}),
    ],
)
def test_bad_query_gets_the_post_error(
    client: TestClient, query: dict[str, str], body: dict[str, Any]
) -> None:
    got = client.get(STREAM, params={"text_input": "x", **query})
    posted = client.post(STREAM, json={"text_input": "x", **body})
    assert got.status_code == posted.status_code == 400
    assert got.headers["content-type"] == "application/json"
    assert got.json() == posted.json() and set(got.json()) == {"error"}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({}, "text_input: Field required"),
        ({"text_input": ["a", "b"]}, "text_input: Input should be a valid string"),
        ({"text_input": "x", "stream": "maybe"}, "stream: Input should be a valid boolean"),
        ({"text_input": "x", "max_tokens": "many"}, "max_tokens: Input should be a valid integer"),
        (
            {"text_input": "x", "stop_token_ids": "-1"},
            "stop_token_ids.0: Input should be greater than or equal to 0",
        ),
        (
            {"text_input": "x", "tempreature": "1"},
            "tempreature: unknown query parameter (did you mean 'temperature'?); "
            "other vLLM parameters go in sampling_parameters",
        ),
        (
            {"text_input": "x", "allowed_token_ids": "5"},
            "allowed_token_ids: unknown query parameter",
        ),
        ({"text_input": "x", "parameters": "{}"}, "parameters: unknown query parameter"),
        ({"text_input": "x", "image": "aGk="}, "image: unknown query parameter"),
    ],
)
def test_bad_query_names_the_parameter(
    client: TestClient, query: dict[str, str], message: str
) -> None:
    response = client.get(STREAM, params=query)
    assert response.status_code == 400 and response.json()["error"].startswith(message)


@pytest.mark.parametrize(
    ("path", "query", "status", "message"),
    [
        (
            STREAM,
            {"text_input": "x", "max_tokens": "0"},
            400,
            "max_tokens: Input should be greater than or equal to 1",
        ),
        (
            "/v2/models/other/generate_stream",
            {"text_input": "x"},
            404,
            "Request for unknown model: 'other' is not found",
        ),
        (
            "/v2/models/fake/versions/7/generate_stream",
            {"text_input": "x"},
            404,
            "'fake' version 7 is not found",
        ),
    ],
)
def test_errors_before_the_stream_are_an_error_event_for_event_source(
    client: TestClient, path: str, query: dict[str, str], status: int, message: str
) -> None:
    plain = client.get(path, params=query)
    assert plain.status_code == status and message in plain.json()["error"]
    response = client.get(path, params=query, headers=EVENT_SOURCE)
    assert response.status_code == 200
    assert named_events(response) == [("error", plain.json())]


def test_unhealthy_engine_is_an_error_event(client: TestClient, engine: FakeEngine) -> None:
    engine.healthy = False
    response = client.get(STREAM, params={"text_input": "x"}, headers=EVENT_SOURCE)
    assert named_events(response) == [
        ("error", {"error": "Model is unavailable due to unhealthy vLLM engine"})
    ]
    assert client.get(STREAM, params={"text_input": "x"}).status_code == 503


def test_error_after_the_first_event_is_a_named_error_event_without_end(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(FakeEngine(fail_after=2, fail_with=ServerError("engine broke")))
    events = named_events(client.get(STREAM, params={"text_input": "x", "max_tokens": 5}))
    assert [name for name, _ in events] == ["message", "message", "error"]
    assert events[-1] == ("error", {"error": "engine broke"})


def test_post_stream_keeps_triton_frames(make_client: Callable[..., TestClient]) -> None:
    """No `event:` lines on POST: neither an end event nor a named error."""
    client = make_client(FakeEngine(fail_after=1, fail_with=ServerError("engine broke")))
    text = client.post(STREAM, json={"text_input": "x", "parameters": {"max_tokens": 3}}).text
    assert "event:" not in text and text.endswith('data: {"error":"engine broke"}\n\n')


def test_versions_path(tmp_path: Path) -> None:
    for version in ("1", "2"):
        write_model(tmp_path, "m", version, config="version_policy: { all { } }")
    engines = {"1": FakeEngine(), "2": FakeEngine()}
    app = create_app(
        Settings(model_repository=[tmp_path]), engine_factory=lambda spec: engines[spec.version]
    )
    with TestClient(app) as client:
        for path, version in (
            ("/v2/models/m/generate_stream", "2"),
            ("/v2/models/m/versions/1/generate_stream", "1"),
        ):
            events = named_events(client.get(path, params={"text_input": "x", "max_tokens": 1}))
            assert events[0][1]["model_version"] == version and events[-1] == ("end", {})
    assert len(engines["1"].requests) == 1 and len(engines["2"].requests) == 1


async def test_closing_the_event_source_aborts_the_engine_request(repository: Path) -> None:
    engine = FakeEngine(step_delay=0.05)
    app = create_app(Settings(model_repository=[repository]), engine_factory=lambda spec: engine)
    async with app.router.lifespan_context(app):
        sent = await call_and_disconnect(
            app,
            "GET",
            STREAM,
            query=b"text_input=x&max_tokens=1000",
            headers=[(b"accept", b"text/event-stream")],
        )
        await eventually(lambda: not engine.active)
    assert not engine.active and len(engine.aborted) == 1
    assert sent[0]["status"] == 200 and any(b"data: " in m.get("body", b"") for m in sent[1:])


def test_api_key_in_the_query_only_for_the_get_stream(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(FakeEngine(), api_keys="k1,k2")
    query: dict[str, str | int] = {"text_input": "x", "max_tokens": 1}
    assert client.get(STREAM, params=query).status_code == 401
    assert client.get(STREAM, params={**query, "api_key": "nope"}).status_code == 401
    assert (
        client.get(
            STREAM, params=[*query.items(), ("api_key", "k1"), ("api_key", "k2")]
        ).status_code
        == 401
    )
    for key in ("k1", "k2"):
        response = client.get(STREAM, params={**query, "api_key": key})
        assert response.status_code == 200 and named_events(response)[-1] == ("end", {})
    versioned = client.get(
        "/v2/models/fake/versions/1/generate_stream", params={**query, "api_key": "k1"}
    )
    assert versioned.status_code == 200
    assert (
        client.get(STREAM, params=query, headers={"Authorization": "Bearer k2"}).status_code == 200
    )
    # Everywhere else the key goes in the header only.
    assert (
        client.post(STREAM, params={"api_key": "k1"}, json={"text_input": "x"}).status_code == 401
    )
    assert client.get("/v2/models/fake", params={"api_key": "k1"}).status_code == 401
    assert (
        client.get("/v2/models/fake/generate_stream/x", params={"api_key": "k1"}).status_code == 401
    )


def test_page_docs_and_assets_stay_open_with_api_keys(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(FakeEngine(), api_keys="k1")
    for path in (
        "/",
        "/docs",
        "/redoc",
        "/openapi.json",
        "/static/playground/playground.js",
        "/static/swagger-ui/swagger-ui-bundle.js",
        "/static/vendor/redoc/redoc.standalone.js",
    ):
        assert client.get(path).status_code == 200, path
    assert client.post("/v2/repository/index", json={"ready": True}).status_code == 401
    assert client.get("/v2").status_code == 401


def test_the_api_key_is_never_logged(
    make_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = make_client(FakeEngine(), api_keys="secret-key-1", log_prompts=True)
    response = client.get(
        STREAM, params={"text_input": "x", "max_tokens": 1, "api_key": "secret-key-1"}
    )
    assert response.status_code == 200
    client.get(STREAM, params={"text_input": "x", "max_tokens": 0, "api_key": "secret-key-1"})
    access = [r for r in caplog.records if r.name == "app.access"]
    assert len(access) == 2 and access_fields(access[0])["path"] == STREAM
    server_records = [
        r for r in caplog.records if not r.name.startswith("httpx")
    ]  # not the client's
    assert all("secret-key-1" not in record.getMessage() for record in server_records)
    assert all("secret-key-1" not in json.dumps(getattr(r, "access", {})) for r in server_records)
