"""Reloads without downtime, Triton's load overrides, and failed loads (engine double)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.service import GenerationService
from app.errors import ModelUnavailableError
from app.main import create_app
from app.repository.layout import ModelSpec
from app.repository.registry import ModelRegistry
from app.repository.served_model import ServedModel
from app.schemas.generate import GenerateRequest
from app.settings import Settings
from app.triton.inputs import body_inputs
from app.triton.request import StreamPolicy, triton_request
from tests.doubles import FakeEngine
from tests.support.clients import started_clients
from tests.support.repository import EXPLICIT_CONTROL
from tests.support.waiting import wait_for

BODY = {"text_input": "x", "parameters": {"max_tokens": 2}}
LOAD = "/v2/repository/models/fake/load"


class Engines:
    """An engine factory keeping every engine and the spec it was made for."""

    def __init__(self) -> None:
        self.made: list[tuple[ModelSpec, FakeEngine]] = []
        self.next_options: dict[str, Any] = {}

    def __call__(self, spec: ModelSpec) -> FakeEngine:
        engine = FakeEngine(**self.next_options)
        self.made.append((spec, engine))
        return engine

    @property
    def engines(self) -> list[FakeEngine]:
        return [engine for _, engine in self.made]


@pytest.fixture
def served(repository: Path) -> Iterator[Callable[..., tuple[TestClient, Engines]]]:
    with started_clients() as start:

        def build(**settings: Any) -> tuple[TestClient, Engines]:
            engines = Engines()
            settings = {"engine_probe_interval_seconds": 0, **EXPLICIT_CONTROL, **settings}
            return start(
                create_app(
                    Settings(model_repository=[repository], **settings), engine_factory=engines
                )
            ), engines

        yield build


def load_in_background(
    client: TestClient, body: dict[str, Any] | None = None
) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: result.setdefault("response", client.post(LOAD, json=body))
    )
    thread.start()
    return thread, result


def statuses_while(client: TestClient, thread: threading.Thread) -> set[int]:
    """Generate requests sent one after another until `thread` ends: their statuses."""
    seen = set()
    while thread.is_alive():
        seen.add(client.post("/v2/models/fake/generate", json=BODY).status_code)
    thread.join()
    return seen


def test_a_reload_serves_from_the_old_engine_until_the_new_one_is_ready(
    served: Callable[..., tuple[TestClient, Engines]],
) -> None:
    client, engines = served()
    engines.next_options = {"start_delay": 0.5}
    thread, result = load_in_background(client)
    assert statuses_while(client, thread) == {200}
    assert result["response"].status_code == 200
    old, new = engines.engines
    assert old.requests and old.stopped and new.started and not new.stopped
    assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200 and new.requests


async def generated_text(model: ServedModel) -> str:
    """A Triton generate request (BODY) read against `model`, run through the core."""
    body = GenerateRequest.model_validate(BODY)
    request = triton_request(body_inputs(body), model, StreamPolicy(default=False)).request
    chunks = [chunk async for chunk in GenerationService().stream(model, request)]
    return "".join(c.text for chunk in chunks for c in chunk.completions)


async def test_a_request_that_found_the_old_version_runs_on_the_new_one_after_a_reload(
    repository: Path,
) -> None:
    """A request resolves its model, then is admitted a moment later: a reload that ended in
    between hands it to the version that took the old one's place, not a 503."""
    engines = Engines()
    registry = ModelRegistry(repository, engines)
    await registry.start()
    found = registry.get("fake")
    await registry.load("fake")
    old, new = engines.engines
    assert old.stopped and registry.get("fake") is not found
    assert await generated_text(found)
    assert new.requests and not old.requests
    await registry.unload("fake")
    with pytest.raises(ModelUnavailableError):  # a 503: no version took its place
        await generated_text(found)
    await registry.shutdown()


def test_a_reload_that_fails_to_start_keeps_the_old_engine_serving(
    served: Callable[..., tuple[TestClient, Engines]],
) -> None:
    client, engines = served()
    engines.next_options = {"start_error": RuntimeError("out of KV cache memory")}
    response = client.post(LOAD)
    assert response.status_code == 400
    assert response.json() == {"error": "load failed for model 'fake': out of KV cache memory"}
    old, new = engines.engines
    assert not old.stopped and new.stopped
    assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200 and old.requests


def test_a_reload_with_a_broken_model_json_keeps_the_old_engine_serving(
    served: Callable[..., tuple[TestClient, Engines]], repository: Path
) -> None:
    client, engines = served()
    (repository / "fake" / "1" / "model.json").write_text("{broken")
    response = client.post(LOAD)
    assert response.status_code == 400 and "invalid JSON" in response.json()["error"]
    assert len(engines.engines) == 1 and not engines.engines[0].stopped
    assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200


def test_an_in_place_reload_answers_503_meanwhile_never_404(
    served: Callable[..., tuple[TestClient, Engines]],
) -> None:
    client, engines = served(reload_in_place=True)
    engines.next_options = {"start_delay": 0.5}
    thread, result = load_in_background(client)
    assert wait_for(lambda: len(engines.engines) == 2)
    assert statuses_while(client, thread) <= {200, 503}
    assert result["response"].status_code == 200
    old, new = engines.engines
    assert old.stopped and new.started
    assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200


def test_a_config_override_replaces_config_pbtxt_for_this_load(
    served: Callable[..., tuple[TestClient, Engines]],
) -> None:
    client, engines = served()
    config = {"backend": "vllm", "parameters": {"APPLY_CHAT_TEMPLATE": {"string_value": "true"}}}
    assert client.post(LOAD, json={"parameters": {"config": json.dumps(config)}}).status_code == 200
    assert client.get("/v2/models/fake/config").json()["parameters"] == {
        "APPLY_CHAT_TEMPLATE": {"string_value": "true"}
    }
    client.post("/v2/models/fake/generate", json={"text_input": "hi"})
    assert engines.engines[-1].requests[-1].prompt == "<user>hi</user><assistant>"
    assert engines.made[-1][0].engine_args == {"model": "fake-model"}


def test_file_overrides_replace_the_model_folder(
    served: Callable[..., tuple[TestClient, Engines]],
) -> None:
    client, engines = served()
    model_json = base64.b64encode(
        json.dumps({"model": "other-model", "max_model_len": 64}).encode()
    ).decode()
    weights = base64.b64encode(b"{}").decode()
    body = {
        "parameters": {
            "config": "{}",
            "file:1/model.json": model_json,
            "file:1/other-model/config.json": weights,
        }
    }
    assert client.post(LOAD, json=body).status_code == 200
    spec = engines.made[-1][0]
    assert spec.engine_args["max_model_len"] == 64 and spec.version == "1"
    assert spec.engine_args["model"].endswith("/fake/1/other-model")
    assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"bogus": 1}, "unrecognized load parameter 'bogus'."),
        ({"config": "{not json"}, "Invalid config override: "),
        ({"config": json.dumps({"no_such_field": 1})}, "Invalid config override: "),
        ({"config": 5}, "invalid value type for load parameter 'config'"),
        ({"file:1/model.json": "e30="}, "need the 'config' parameter"),
        (
            {"config": "{}", "file:../../etc/passwd": "e30="},
            "the path must stay inside the model folder",
        ),
        (
            {"config": "{}", "file:1/model.json": "not base64!"},
            "parameters.file:1/model.json: not base64",
        ),
    ],
)
def test_bad_overrides_are_a_400_naming_the_parameter(
    served: Callable[..., tuple[TestClient, Engines]], parameters: dict[str, Any], message: str
) -> None:
    client, engines = served()
    response = client.post(LOAD, json={"parameters": parameters})
    assert response.status_code == 400 and message in response.json()["error"]
    assert len(engines.engines) == 1 and not engines.engines[0].stopped
