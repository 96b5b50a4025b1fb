"""Once the server drains (SIGTERM), no engine starts: load and unload requests answer 503 on
HTTP and UNAVAILABLE on gRPC, as Triton answers them once it exits, and `poll` mode stops
looking at the repository (engine double)."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from app.main import create_app
from app.repository.layout import ModelSpec
from app.settings import Settings
from app.triton.repository import DRAINING_MESSAGE
from tests.doubles import FakeEngine
from tests.support.clients import portal_of, runtime_of, started_clients
from tests.support.repository import EXPLICIT_CONTROL, write_model
from tests.support.triton_grpc import serve_grpc_app

POLL_SECONDS = 0.05


class Engines:
    """An engine factory that counts the engines it made."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def __call__(self, spec: ModelSpec) -> FakeEngine:
        self.made.append(spec.name)
        return FakeEngine()


def test_load_and_unload_requests_answer_503_during_a_drain(repository: Path) -> None:
    write_model(repository, "other", model="other-model")
    engines = Engines()
    settings = Settings(model_repository=[repository], **EXPLICIT_CONTROL)
    with started_clients() as start:
        client = start(create_app(settings, engine_factory=engines))
        made = list(engines.made)
        portal_of(client).call(runtime_of(client).registry.drain)
        for path in (
            "/v2/repository/models/fake/load",
            "/v2/repository/models/other/load",
            "/v2/repository/models/fake/unload",
        ):
            response = client.post(path)
            assert response.status_code == 503, (path, response.text)
            assert response.json() == {"error": DRAINING_MESSAGE}
        assert engines.made == made


def test_grpc_load_and_unload_answer_unavailable_during_a_drain(repository: Path) -> None:
    """The check reads the registry's drain flag, which the HTTP test above sets through a
    real drain; here it is set directly (the gRPC server runs in another thread's loop)."""
    engines = Engines()
    with (
        serve_grpc_app(repository, engines, **EXPLICIT_CONTROL) as served,
        triton_grpc.InferenceServerClient(served.grpc_url) as client,
    ):
        made = list(engines.made)
        served.runtime.registry.draining = True
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as refused:
                call("fake")
            assert refused.value.status() == str(grpc.StatusCode.UNAVAILABLE)
            assert refused.value.message() == DRAINING_MESSAGE
        assert engines.made == made


def test_poll_mode_stops_looking_at_the_repository_once_the_server_drains(
    tmp_path: Path,
) -> None:
    root = tmp_path / "polled"
    write_model(root, "fake")
    engines = Engines()
    settings = Settings(
        model_repository=[root], model_control_mode="poll", repository_poll_secs=POLL_SECONDS
    )
    with started_clients() as start:
        client = start(create_app(settings, engine_factory=engines))
        portal_of(client).call(runtime_of(client).registry.drain)
        write_model(root, "added", model="added-model")
        time.sleep(20 * POLL_SECONDS)
        assert engines.made == ["fake"]
        assert client.get("/v2/models/added/ready").status_code == 404
