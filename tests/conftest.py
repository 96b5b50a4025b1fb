"""Shared fixtures: a temporary model repository and an app served by the engine double."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.repository import write_model
from tests.support.servers import RunningServer, kill_tree, start_server

os.environ.setdefault("METRICS_PORT", "0")
"""Apps built by the tests serve /metrics on their HTTP port only: Triton's port 8002 is left to
the servers the tests start (each on a free port) and to anything else on the machine."""


@pytest.fixture(autouse=True)
def thawed_after_each_test() -> Iterator[None]:
    """An app's start-up freezes the heap (app/repository/heap_freezer.py): thaw it after each test,
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

    def build(engine: FakeEngine, root: Path | None = None, **settings: Any) -> TestClient:
        app = create_app(
            Settings(model_repository=[root or repository], **settings),
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


@pytest.fixture(scope="session")
def limited_server() -> Iterator[RunningServer]:
    """A real server of the default model with MAX_TOKENS_LIMIT=2, shared by the fuzz tier's
    real-engine phase and the limit tests (one engine start for both); each checks its log."""
    running = start_server(name="limited", env={"MAX_TOKENS_LIMIT": "2"})
    try:
        yield running
    finally:
        kill_tree(running.process)


SUITE_PART = f"-{os.environ['SUITE_PART']}" if os.environ.get("SUITE_PART") else ""
"""Which of `make test`'s side-by-side pytest processes this is (its artifacts' suffix)."""
_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum each test's setup, call and teardown times for the session's durations file."""
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def _seconds_per_file() -> dict[str, float]:
    per_file: dict[str, float] = {}
    for nodeid, seconds in _durations.items():
        path = nodeid.split("::", 1)[0]
        per_file[path] = per_file.get(path, 0.0) + seconds
    return dict(sorted(per_file.items(), key=lambda item: -item[1]))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write every test's seconds and each file's total to tests/artifacts/durations.json
    (durations-<part>.json for a part of the suite that `make test` runs beside another)."""
    if not _durations:
        return
    artifacts = Path(__file__).parent / "artifacts"
    artifacts.mkdir(exist_ok=True)
    summary = {
        "files": _seconds_per_file(),
        "tests": dict(sorted(_durations.items(), key=lambda i: -i[1])),
    }
    (artifacts / f"durations{SUITE_PART}.json").write_text(json.dumps(summary, indent=1))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The slowest files, so that the suite's time can be read from CI's tail."""
    ranked = list(_seconds_per_file().items())[:20]
    if ranked:
        terminalreporter.section("slowest files")
        for path, seconds in ranked:
            terminalreporter.write_line(f"{seconds:8.1f}s {path}")
