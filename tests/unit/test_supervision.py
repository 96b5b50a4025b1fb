"""Engine supervision with the engine double: failed engines are replaced with backoff, within
a restart budget; an exhausted budget fails liveness."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.repository.registry import ModelRegistry
from app.repository.served_model import ModelState
from app.repository.supervision import EngineSupervisor, RestartBudget, RestartPolicy
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.clients import portal_of, runtime_of, started_clients
from tests.support.repository import EXPLICIT_CONTROL
from tests.support.waiting import wait_for

FAST_RESTARTS: dict[str, Any] = {
    "engine_restart_backoff_seconds": 0.01,
    "engine_restart_backoff_max_seconds": 0.05,
    "engine_probe_interval_seconds": 0,
}
UNHEALTHY = {"error": "Model is unavailable due to unhealthy vLLM engine"}
T = TypeVar("T")


class EngineSeries:
    """An engine factory that makes a new `FakeEngine` each time, keeping them all."""

    def __init__(
        self, replacements_wait_for: threading.Event | None = None, **engine_options: Any
    ) -> None:
        self.engines: list[FakeEngine] = []
        self.options = engine_options
        self.replacements_wait_for = replacements_wait_for
        """The engines after the first start once this is set (where it is given)."""

    def __call__(self, spec: object) -> FakeEngine:
        engine = FakeEngine(**self.options)
        if self.engines:
            engine.start_gate = self.replacements_wait_for
        self.engines.append(engine)
        return engine


@pytest.fixture
def supervised(repository: Path) -> Iterator[Callable[..., tuple[TestClient, EngineSeries]]]:
    with started_clients() as start:

        def build(
            series: EngineSeries | None = None, **settings: Any
        ) -> tuple[TestClient, EngineSeries]:
            series = series or EngineSeries()
            app = create_app(
                Settings(
                    model_repository=[repository],
                    **{**FAST_RESTARTS, **EXPLICIT_CONTROL, **settings},
                ),
                engine_factory=series,
            )
            return start(app), series

        yield build


def registry_of(client: TestClient) -> ModelRegistry:
    return runtime_of(client).registry


def restarts_metric(client: TestClient) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith('server_engine_restarts_total{model="fake",version="1"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_dead_engine_is_replaced_and_serves_again(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised()
    series.engines[0].healthy = False
    assert wait_for(
        lambda: len(series.engines) == 2 and client.get("/v2/health/ready").status_code == 200
    )
    assert series.engines[0].stopped and series.engines[1].started
    model = registry_of(client).get("fake")
    assert model.engine is series.engines[1] and model.state is ModelState.READY
    response = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "parameters": {"max_tokens": 2}}
    )
    assert response.status_code == 200 and len(series.engines[1].requests) == 1
    assert restarts_metric(client) == 1
    assert client.get("/v2/health/live").status_code == 200


def test_while_restarting_requests_get_the_backends_unhealthy_error(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    """The replacement starts only once the checks are done, however slow the host."""
    replacement_may_start = threading.Event()
    client, series = supervised(EngineSeries(replacements_wait_for=replacement_may_start))
    series.engines[0].healthy = False
    try:
        assert wait_for(lambda: len(series.engines) == 2)
        assert registry_of(client).get("fake").state is ModelState.RESTARTING
        for route in ("generate", "generate_stream"):
            response = client.post(f"/v2/models/fake/{route}", json={"text_input": "x"})
            assert response.status_code == 503 and response.json() == UNHEALTHY
        assert client.get("/v2/health/ready").status_code == 503
        assert client.get("/v2/health/live").status_code == 200
        (entry,) = client.post("/v2/repository/index").json()
        assert entry["state"] == "UNAVAILABLE" and "restarting" in entry["reason"]
    finally:
        replacement_may_start.set()
    assert wait_for(lambda: client.get("/v2/health/ready").status_code == 200)


def test_exhausted_restarts_fail_liveness(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(engine_restart_max=1)
    series.engines[0].healthy = False
    assert wait_for(
        lambda: len(series.engines) == 2 and client.get("/v2/health/ready").status_code == 200
    )
    series.engines[1].healthy = False
    assert wait_for(lambda: client.get("/v2/health/live").status_code == 503)
    assert len(series.engines) == 2 and series.engines[1].stopped
    assert registry_of(client).get("fake").state is ModelState.FAILED
    assert client.get("/v2/health/ready").status_code == 503
    (entry,) = client.post("/v2/repository/index").json()
    assert entry == {
        "name": "fake",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": "engine failed: restarts exhausted",
    }
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
    client, series = supervised(
        engine_probe_interval_seconds=0.05, engine_probe_timeout_seconds=0.1
    )
    series.engines[0].ping_hangs = True
    assert wait_for(
        lambda: len(series.engines) == 2 and client.get("/v2/health/ready").status_code == 200
    )
    assert series.engines[0].stopped and restarts_metric(client) == 1


def test_a_failed_restart_is_retried(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    series = EngineSeries()
    client, _ = supervised(series)
    series.options = {"start_error": RuntimeError("no memory")}
    series.engines[0].healthy = False
    assert wait_for(lambda: len(series.engines) >= 3)
    series.options = {}
    assert wait_for(lambda: client.get("/v2/health/ready").status_code == 200)
    assert all(engine.stopped for engine in series.engines[1:-1])
    assert restarts_metric(client) == 1


def test_an_unloaded_model_is_not_restarted(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised()
    assert client.post("/v2/repository/models/fake/unload").status_code == 200
    series.engines[0].healthy = False
    assert not wait_for(lambda: len(series.engines) > 1, timeout=0.5)


def test_restart_backoff_doubles_up_to_its_limit_and_the_budget_is_per_window() -> None:
    budget = RestartBudget(
        RestartPolicy(max_restarts=4, backoff_seconds=1, max_backoff_seconds=5, window_seconds=60)
    )
    delays = []
    while not budget.exhausted():
        delays.append(budget.next_delay())
        budget.record()
    assert delays == [1, 2, 4, 5]
    assert RestartBudget(RestartPolicy(enabled=False)).exhausted()
    old = RestartBudget(RestartPolicy(max_restarts=1, window_seconds=0.01))
    old.record()
    assert wait_for(lambda: not old.exhausted(), timeout=1)


def stream_in_thread(
    client: TestClient, body: dict[str, Any]
) -> tuple[threading.Thread, list[str]]:
    """A streaming request read to its end in a thread; its `data:` lines land in the list."""
    lines: list[str] = []

    def read() -> None:
        with client.stream("POST", "/v2/models/fake/generate_stream", json=body) as response:
            lines.extend(line for line in response.iter_lines() if line.startswith("data: "))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, lines


def test_a_step_longer_than_the_probe_timeout_keeps_the_engine(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    """A busy core answers a probe only between two steps: probes go unanswered while each
    step lasts 0.3 s, but the engine steps, so it is kept."""
    client, series = supervised(
        EngineSeries(step_delay=0.3),
        engine_probe_interval_seconds=0.05,
        engine_probe_timeout_seconds=0.05,
        engine_stall_seconds=60,
    )
    engine = series.engines[0]
    engine.ping_waits_for_steps = True
    response = client.post(
        "/v2/models/fake/generate", json={"text_input": "x", "parameters": {"max_tokens": 6}}
    )
    assert (
        response.status_code == 200
        and response.json()["text_output"] == "xHello from the fake engine."
    )
    assert engine.unanswered_pings > 0
    assert len(series.engines) == 1 and restarts_metric(client) == 0


def test_a_stopped_engine_with_requests_pending_is_replaced_after_the_stall_time(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    """A stopped core (SIGSTOP) answers nothing and does not step: once its requests have
    waited ENGINE_STALL_SECONDS without a step, it is replaced."""
    client, series = supervised(
        EngineSeries(step_delay=0.05),
        engine_probe_interval_seconds=0.05,
        engine_probe_timeout_seconds=0.1,
        engine_stall_seconds=1,
    )
    engine = series.engines[0]
    thread, lines = stream_in_thread(
        client, {"text_input": "x", "parameters": {"max_tokens": 1000}}
    )
    assert wait_for(lambda: len(lines) >= 2)
    engine.hung = True
    stopped_at = time.monotonic()
    assert wait_for(
        lambda: len(series.engines) == 2 and client.get("/v2/health/ready").status_code == 200
    )
    assert time.monotonic() - stopped_at >= 1
    thread.join(5)
    assert engine.stopped and json.loads(lines[-1].removeprefix("data: ")) == UNHEALTHY
    assert restarts_metric(client) == 1


def test_a_hung_engine_whose_requests_finished_is_caught_by_its_probe(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(
        engine_probe_interval_seconds=0.05,
        engine_probe_timeout_seconds=0.1,
        engine_stall_seconds=60,
    )
    series.engines[0].hung = True
    assert wait_for(
        lambda: len(series.engines) == 2 and client.get("/v2/health/ready").status_code == 200
    )


def handover_of(client: TestClient) -> EngineSupervisor:
    supervisors = registry_of(client)._supervisors[id(registry_of(client).get("fake"))]
    return supervisors[0]


def spawn(client: TestClient, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run `coroutine` as a task of the app's event loop; return the task at once."""
    (task,) = portal_of(client).call(lambda: (asyncio.ensure_future(coroutine),))
    return task


def test_the_supervisor_hands_the_replacement_to_the_requests_waiting_for_it(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(EngineSeries(start_delay=0.3))
    first = series.engines[0]
    supervisor = handover_of(client)
    assert first.handover is supervisor
    waiting = spawn(client, supervisor.replacement(first))
    first.healthy = False
    assert wait_for(waiting.done)
    assert waiting.result() is series.engines[1] and series.engines[1].handover is supervisor
    supervisor.count_migration()
    assert (
        'server_requests_migrated_total{model="fake",version="1"} 1.0'
        in client.get("/metrics").text
    )


def test_no_replacement_once_restarts_are_exhausted(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(engine_restart_max=0)
    first = series.engines[0]
    supervisor = handover_of(client)
    waiting = spawn(client, supervisor.replacement(first))
    first.healthy = False
    assert wait_for(waiting.done) and waiting.result() is None
    assert client.get("/v2/health/live").status_code == 503


def test_no_replacement_when_migration_is_off_or_the_wait_is_over(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(engine_migrate_requests=False)
    assert series.engines[0].handover is None
    assert portal_of(client).call(handover_of(client).replacement, series.engines[0]) is None
    client, series = supervised(EngineSeries(start_delay=5), engine_migration_wait_seconds=0.2)
    supervisor = handover_of(client)
    series.engines[0].healthy = False
    started = time.monotonic()
    assert portal_of(client).call(supervisor.replacement, series.engines[0]) is None
    assert time.monotonic() - started < 2


def test_unloading_ends_the_wait_for_a_replacement(
    supervised: Callable[..., tuple[TestClient, EngineSeries]],
) -> None:
    client, series = supervised(
        EngineSeries(start_delay=5), model_control_mode="explicit", load_model=["*"]
    )
    supervisor = handover_of(client)
    first = series.engines[0]
    first.healthy = False
    assert wait_for(lambda: len(series.engines) == 2)
    waiting = spawn(client, supervisor.replacement(first))
    assert client.post("/v2/repository/models/fake/unload").status_code == 200
    assert wait_for(waiting.done, timeout=2) and waiting.result() is None
