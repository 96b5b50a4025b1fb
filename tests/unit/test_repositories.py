"""Several model repositories (Triton's repeated --model-repository), --exit-on-error and
--strict-readiness, with the engine double: what is served, listed, loaded and ready."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.errors import ModelConfigError
from app.main import create_app
from app.settings import Settings
from app.triton.model_table import model_table
from tests.doubles import FakeEngine
from tests.support.clients import runtime_of
from tests.support.repository import EXPLICIT_CONTROL, write_model

TWIN = {
    "name": "twin",
    "state": "UNAVAILABLE",
    "reason": "model appears in two or more repositories",
}


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    write_model(first, "alpha")
    write_model(second, "beta")
    write_model(first, "twin")
    write_model(second, "twin")
    return [first, second]


def started(
    roots: list[Path], engine_factory: Callable[..., FakeEngine] | None = None, **settings: Any
) -> TestClient:
    app = create_app(
        Settings(model_repository=roots, **settings),
        engine_factory=engine_factory or (lambda spec: FakeEngine()),
    )
    return TestClient(app, raise_server_exceptions=False)


def test_a_model_in_two_repositories_stops_the_start(roots: list[Path]) -> None:
    with pytest.raises(
        ModelConfigError, match="failed to load 'twin': model appears in two or more repositories"
    ):
        started(roots)


def test_without_exit_on_error_both_repositories_serve_and_the_twin_is_unavailable(
    roots: list[Path],
) -> None:
    with started(roots, exit_on_error=False) as client:
        index = client.post("/v2/repository/index").json()
        assert index == [
            {"name": "alpha", "version": "1", "state": "READY"},
            {"name": "beta", "version": "1", "state": "READY"},
            TWIN,
        ]
        assert client.post("/v2/models/beta/generate", json={"text_input": "x"}).status_code == 200
        assert client.post("/v2/models/twin/generate", json={"text_input": "x"}).status_code == 404
        assert client.get("/v2/health/ready").status_code == 200, (
            "a model never tried does not count"
        )


def test_each_model_is_read_from_its_own_repository(roots: list[Path]) -> None:
    seen: list[Path] = []

    def factory(spec):
        seen.append(spec.version_path)
        return FakeEngine()

    with started(roots, factory, exit_on_error=False):
        assert sorted(seen) == [roots[0] / "alpha" / "1", roots[1] / "beta" / "1"]


def test_a_twin_cannot_be_loaded_and_a_poll_leaves_it_out(roots: list[Path]) -> None:
    with started(roots, exit_on_error=False, **EXPLICIT_CONTROL) as client:
        refused = client.post("/v2/repository/models/twin/load")
        assert refused.status_code == 400
        assert refused.json() == {
            "error": "failed to load 'twin': model appears in two or more repositories"
        }
        assert client.post("/v2/repository/models/beta/load").status_code == 200


def test_a_model_that_fails_at_start_is_unavailable_and_keeps_strict_readiness_off(
    roots: list[Path],
) -> None:
    def factory(spec):
        return (
            FakeEngine(start_error=RuntimeError("no memory"))
            if spec.name == "beta"
            else FakeEngine()
        )

    with started(roots, factory, exit_on_error=False) as client:
        index = {entry["name"]: entry for entry in client.post("/v2/repository/index").json()}
        assert index["beta"] == {
            "name": "beta",
            "state": "UNAVAILABLE",
            "reason": "load failed: no memory",
        }
        assert client.get("/v2/health/ready").status_code == 503, (
            "strict readiness: beta is not ready"
        )
        assert client.post("/v2/models/alpha/generate", json={"text_input": "x"}).status_code == 200
    with started(roots, factory, exit_on_error=False, strict_readiness=False) as client:
        assert client.get("/v2/health/ready").status_code == 200


def test_an_engine_failing_at_start_stops_the_start_by_default(roots: list[Path]) -> None:
    def factory(spec):
        return FakeEngine(start_error=RuntimeError("no memory"))

    client = started([roots[0]], factory, models=["alpha"])
    with pytest.raises(RuntimeError, match="no memory"), client:
        pass


def test_one_repository_as_a_single_path_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_model(tmp_path, "alpha")
    monkeypatch.setenv("MODEL_REPOSITORY", str(tmp_path))
    assert Settings().model_repository == [tmp_path]
    monkeypatch.setenv("MODEL_REPOSITORY", f'["{tmp_path}", "/other"]')
    assert Settings().model_repository == [tmp_path, Path("/other")]


def test_the_model_table_is_tritons(roots: list[Path]) -> None:
    with started(roots, exit_on_error=False, **EXPLICIT_CONTROL) as client:
        client.post("/v2/repository/models/alpha/unload")
        table = model_table(runtime_of(client).registry.index())
    assert table == (
        "\n"
        "+-------+---------+--------------------------------------------------------+\n"
        "| Model | Version | Status                                                 |\n"
        "+-------+---------+--------------------------------------------------------+\n"
        "| alpha | -       | UNAVAILABLE: unloaded                                  |\n"
        "| beta  | 1       | READY                                                  |\n"
        "| twin  | -       | UNAVAILABLE: model appears in two or more repositories |\n"
        "+-------+---------+--------------------------------------------------------+\n"
    )
