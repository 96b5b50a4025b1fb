"""Error bodies never carry a validation dump or a stack trace (engine double): pydantic's echo
of the input and its help link, and a server-side exception's traceback, stay out of what
Triton HTTP, OpenAI and gRPC clients read, and go to the server's log."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc as triton_grpc
from pydantic import BaseModel, ValidationError
from tritonclient.utils import InferenceServerException

from app.errors import InvalidRequestError
from tests.doubles import FakeEngine
from tests.support.access_log import access_fields
from tests.support.repository import EXPLICIT_CONTROL
from tests.support.triton_grpc import GrpcApp, serve_grpc_app, stream_results, vllm_request

ECHOED = "client-value-echoed"
DUMP_MARKERS = (ECHOED, "input_value", "errors.pydantic.dev", "For further information")
REMOTE_TRACEBACK = (
    "engine core died\nTraceback (most recent call last):\n"
    '  File "/srv/secret/vllm/core.py", line 7, in step\n    raise ValueError("bad step")\n'
    "ValueError: bad step"
)
"""The text of an error raised in another process (Ray's, an engine core's): it holds the
remote traceback."""
TRACEBACK_MARKERS = ("Traceback", "/srv/secret", 'raise ValueError("bad step")')


class EngineKnob(BaseModel):
    trust_remote_code: bool


def validation_error() -> ValidationError:
    """A pydantic failure whose text echoes the input and links pydantic's documentation."""
    try:
        EngineKnob.model_validate({"trust_remote_code": ECHOED})
    except ValidationError as exc:
        return exc
    raise AssertionError("validated")


def clean(text: str, markers: tuple[str, ...]) -> bool:
    """Whether `text` holds none of `markers`."""
    return not [marker for marker in markers if marker in text]


@contextmanager
def served(repository: Path, engine: FakeEngine) -> Iterator[GrpcApp]:
    """The app, HTTP and gRPC, around `engine`."""
    with serve_grpc_app(repository, lambda spec: engine) as app:
        yield app


def grpc_errors(app: GrpcApp, **request: Any) -> list[str]:
    """The error messages of one streamed request."""
    client = triton_grpc.InferenceServerClient(app.grpc_url)
    results = stream_results(client, [vllm_request("Hi", "r1", **request)])
    return [str(error) for _, error in results if error is not None]


def access_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The `error` field of every access-log line."""
    return [access_fields(r).get("error", "") for r in caplog.records if r.name == "app.access"]


def test_a_validation_dump_in_an_engine_error_reaches_only_the_log(
    repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The vLLM adapter passes a ValueError's text on as a 400 (pydantic's errors are
    ValueErrors): its dump is cut from every protocol's answer, and logged whole."""
    caplog.set_level(logging.INFO, logger="app.access")
    engine = FakeEngine(fail_with=InvalidRequestError(str(validation_error())))
    with served(repository, engine) as app, httpx.Client(base_url=app.http_url) as http:
        triton = http.post("/v2/models/fake/generate", json={"text_input": "Hi"})
        openai = http.post("/v1/completions", json={"model": "fake", "prompt": "Hi"})
        (grpc_error,) = grpc_errors(app)
    answers = [triton.json()["error"], openai.json()["error"]["message"], grpc_error]
    assert (triton.status_code, openai.status_code) == (400, 400)
    for answer in answers:
        assert "Input should be a valid boolean" in answer and clean(answer, DUMP_MARKERS), answer
    logged = access_errors(caplog)
    assert len(logged) == 3 and all(ECHOED in error and "input_value" in error for error in logged)


def test_a_structured_output_of_the_wrong_type_is_named_without_its_dump(
    repository: Path,
) -> None:
    parameters = {"structured_outputs": json.dumps({"json_object": ECHOED})}
    with served(repository, FakeEngine()) as app, httpx.Client(base_url=app.http_url) as http:
        triton = http.post(
            "/v2/models/fake/generate", json={"text_input": "Hi", "parameters": parameters}
        )
        (grpc_error,) = grpc_errors(app, sampling_parameters=parameters)
    assert triton.status_code == 400
    for answer in (triton.json()["error"], grpc_error):
        assert "parameters.structured_outputs.json_object: Input should be a valid boolean" in (
            answer
        )
        assert clean(answer, DUMP_MARKERS), answer


def test_a_server_side_traceback_reaches_only_the_log(
    repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine failure once streams have started: an error frame (Triton's, OpenAI's) or
    response (gRPC) with the error's last line, the traceback in the log."""
    caplog.set_level(logging.INFO)
    engine = FakeEngine(fail_after=1, fail_with=RuntimeError(REMOTE_TRACEBACK))
    with served(repository, engine) as app, httpx.Client(base_url=app.http_url) as http:
        triton = http.post("/v2/models/fake/generate_stream", json={"text_input": "Hi"})
        openai = http.post(
            "/v1/completions", json={"model": "fake", "prompt": "Hi", "stream": True}
        )
        (grpc_error,) = grpc_errors(app, stream=True)
    for answer in (triton.text, openai.text, grpc_error):
        assert "Error generating stream: engine core died" in answer, answer
        assert "ValueError: bad step" in answer and clean(answer, TRACEBACK_MARKERS), answer
    logged = [r for r in caplog.records if r.exc_info and "engine core died" in str(r.exc_info[1])]
    assert len(logged) == 3
    assert "/srv/secret" in caplog.text and "Traceback (most recent call last)" in caplog.text


def test_a_load_failures_dump_and_traceback_reach_only_the_log(
    repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine that fails to start with pydantic's error (as vLLM's engine arguments do):
    the load is refused on HTTP and gRPC without the dump; the log has it and the traceback."""
    engines = iter([FakeEngine(), *(FakeEngine(start_error=validation_error()) for _ in "ab")])
    with serve_grpc_app(repository, lambda spec: next(engines), **EXPLICIT_CONTROL) as app:
        refused = httpx.post(f"{app.http_url}/v2/repository/models/fake/load", timeout=30)
        client = triton_grpc.InferenceServerClient(app.grpc_url)
        with pytest.raises(InferenceServerException) as grpc_refused:
            client.load_model("fake")
        assert client.is_model_ready("fake")
    assert refused.status_code == 400
    for answer in (refused.json()["error"], grpc_refused.value.message()):
        assert answer.startswith("load failed for model 'fake': 1 validation error"), answer
        assert clean(answer, (*DUMP_MARKERS, "Traceback")), answer
    failures = [r for r in caplog.records if r.getMessage() == "loading model 'fake' failed"]
    assert len(failures) == 2 and all(r.exc_info for r in failures)
    assert ECHOED in caplog.text and "Traceback (most recent call last)" in caplog.text
