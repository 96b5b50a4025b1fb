"""Engine supervision with the engine double: failed engines are replaced with backoff, within
a restart budget; an exhausted budget fails liveness."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.repository.registry import ModelRegistry
from app.repository.served_model import ModelState
from app.repository.supervision import RestartBudget, RestartPolicy
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.clients import started_clients
from tests.support.waiting import wait_for

FAST_RESTARTS = {
    "engine_restart_backoff_seconds": 0.01,
    "engine_restart_backoff_max_seconds": 0.05,
    "engine_probe_interval_seconds": 0,
}
UNHEALTHY = {"error": "Model is unavailable due to unhealthy vLLM engine"}


class EngineSeries:
    """An engine factory that makes a new `FakeEngine` each time, keeping them all."""

    def __init__(self, **engine_options: object) -> None:
        self.engines: list[FakeEngine] = []
        self.options = engine_options

    def __call__(self, spec: object) -> FakeEngine:
        engine = FakeEngine(**self.options)  # type: ignore[arg-type]
        self.engines.append(engine)
        return engine


@pytest.fixture
def supervised(repository: Path) -> Iterator[Callable[..., tuple[TestClient, EngineSeries]]]:
    with started_clients() as start:

        def build(series: EngineSeries | None = None, **settings: object) -> tuple[TestClient, EngineSeries]:
            series = series or EngineSeries()
            app = create_app(Settings(model_repository=repository, **{**FAST_RESTARTS, **settings}), engine_factory=series)
            return start(app), series

        yield build


def registry_of(client: TestClient) -> ModelRegistry:
    return client.app.state.runtime.registry  # type: ignore[attr-defined,no-any-return]


def restarts_metric(client: TestClient) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith('server_engine_restarts_total{model="fake",version="1"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_dead_engine_is_replaced_and_serves_again(supervised: Callable[..., tuple[TestClient, EngineSeries]]) -> None:
    client, series = supervised()
    series.engines[0].healthy = False
    assert wait_for(lambda: len(series.engines) == 2 and client.get("/v2/health/ready").status_code == 200)
    assert series.engines[0].stopped and series.engines[1].started
    model = registry_of(client).get("fake")
    assert model.engine is series.engines[1] and model.state is ModelState.READY
    response = client.post("/v2/models/fake/generate", json={"text_input": "x", "parameters": {"max_tokens": 2}})
    assert response.status_code == 200 and len(series.engines[1].requests) == 1
    assert restarts_metric(client) == 1
    assert client.get("/v2/health/live").status_code == 200


def test_while_restarting_requests_get_the_backends_unhealthy_error(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(EngineSeries(start_delay=0.5))
    series.engines[0].healthy = False
    assert wait_for(lambda: len(series.engines) == 2)
    assert registry_of(client).get("fake").state is ModelState.RESTARTING
    for route in ("generate", "generate_stream"):
        response = client.post(f"/v2/models/fake/{route}", json={"text_input": "x"})
        assert response.status_code == 503 and response.json() == UNHEALTHY
    assert client.get("/v2/health/ready").status_code == 503
    assert client.get("/v2/health/live").status_code == 200
    (entry,) = client.post("/v2/repository/index").json()
    assert entry["state"] == "UNAVAILABLE" and "restarting" in entry["reason"]
    assert wait_for(lambda: client.get("/v2/health/ready").status_code == 200)


def test_exhausted_restarts_fail_liveness(supervised: Callable[..., tuple[TestClient, EngineSeries]]) -> None:
    client, series = supervised(engine_restart_max=1)
    series.engines[0].healthy = False
    assert wait_for(lambda: len(series.engines) == 2 and client.get("/v2/health/ready").status_code == 200)
    series.engines[1].healthy = False
    assert wait_for(lambda: client.get("/v2/health/live").status_code == 503)
    assert len(series.engines) == 2 and series.engines[1].stopped
    assert registry_of(client).get("fake").state is ModelState.FAILED
    assert client.get("/v2/health/ready").status_code == 503
    (entry,) = client.post("/v2/repository/index").json()
    assert entry == {"name": "fake", "version": "1", "state": "UNAVAILABLE", "reason": "engine failed: restarts exhausted"}
    assert client.post("/v2/models/fake/generate", json={"text_input": "x"}).json() == UNHEALTHY


def test_with_restarts_off_the_first_failure_fails_liveness(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(engine_restart=False)
    series.engines[0].healthy = False
    assert wait_for(lambda: client.get("/v2/health/live").status_code == 503)
    assert len(series.engines) == 1 and series.engines[0].stopped


def test_a_hung_engine_fails_its_probe_and_is_replaced(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(engine_probe_interval_seconds=0.05, engine_probe_timeout_seconds=0.1)
    series.engines[0].ping_hangs = True
    assert wait_for(lambda: len(series.engines) == 2 and client.get("/v2/health/ready").status_code == 200)
    assert series.engines[0].stopped and restarts_metric(client) == 1


def test_a_failed_restart_is_retried(supervised: Callable[..., tuple[TestClient, EngineSeries]]) -> None:
    series = EngineSeries()
    client, _ = supervised(series)
    series.options = {"start_error": RuntimeError("no memory")}
    series.engines[0].healthy = False
    assert wait_for(lambda: len(series.engines) >= 3)
    series.options = {}
    assert wait_for(lambda: client.get("/v2/health/ready").status_code == 200)
    assert all(engine.stopped for engine in series.engines[1:-1])
    assert restarts_metric(client) == 1


def test_an_unloaded_model_is_not_restarted(supervised: Callable[..., tuple[TestClient, EngineSeries]]) -> None:
    client, series = supervised()
    assert client.post("/v2/repository/models/fake/unload").status_code == 200
    series.engines[0].healthy = False
    assert not wait_for(lambda: len(series.engines) > 1, timeout=0.5)


def test_restart_backoff_doubles_up_to_its_limit_and_the_budget_is_per_window() -> None:
    budget = RestartBudget(RestartPolicy(max_restarts=4, backoff_seconds=1, max_backoff_seconds=5, window_seconds=60))
    delays = []
    while not budget.exhausted():
        delays.append(budget.next_delay())
        budget.record()
    assert delays == [1, 2, 4, 5]
    assert RestartBudget(RestartPolicy(enabled=False)).exhausted()
    old = RestartBudget(RestartPolicy(max_restarts=1, window_seconds=0.01))
    old.record()
    assert wait_for(lambda: not old.exhausted(), timeout=1)
