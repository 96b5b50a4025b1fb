"""Shared fixtures: a temporary model repository and an app served by the engine double."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.repository import write_model


@pytest.fixture(autouse=True)
def thawed_after_each_test() -> Iterator[None]:
    """An app's start-up freezes the heap (app/repository/heap.py): thaw it after each test,
    so that no test's garbage outlives it and no test depends on an earlier one."""
    yield
    gc.unfreeze()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write_model(root, "fake")
    return root


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def make_client(repository: Path) -> Iterator[Callable[..., TestClient]]:
    """Build a started app around given engines: `make_client(engine)` or `(engine, repo)`."""
    clients: list[TestClient] = []

    def build(engine: FakeEngine, root: Path | None = None, **settings: object) -> TestClient:
        app = create_app(
            Settings(model_repository=root or repository, **settings),  # type: ignore[arg-type]
            engine_factory=lambda spec: engine,
        )
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[..., TestClient], engine: FakeEngine) -> TestClient:
    return make_client(engine)
