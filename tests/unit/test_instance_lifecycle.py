"""A model of two instances with the engine double: one instance's engine fails and heals while
the other serves; a request waits for its own instance's replacement; unload, reload and
drain cover both engines; statistics stay per model, `vllm:` series get an instance label."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest

from app.core.service import GenerationService
from app.engine.metrics import VllmMetrics
from app.errors import ServerError
from app.main import create_app
from app.repository.layout import ModelSpec
from app.repository.registry import LifecycleOptions, ModelRegistry
from app.repository.served_model import ModelState
from app.schemas.generate import GenerateRequest
from app.settings import Settings
from app.triton.inputs import body_inputs
from app.triton.request import StreamPolicy, triton_request
from tests.doubles import FakeEngine
from tests.support.clients import portal_of, runtime_of, started_clients
from tests.support.repository import EXPLICIT_CONTROL, write_model
from tests.support.waiting import wait_for

TWO_CPU = "instance_group [{ kind: KIND_CPU count: 2 }]"
FAST_RESTARTS: dict[str, Any] = {
    "engine_restart_backoff_seconds": 0.01,
    "engine_restart_backoff_max_seconds": 0.05,
    "engine_probe_interval_seconds": 0,
}
BODY = {"text_input": "hi", "parameters": {"max_tokens": 2}}


class InstanceEngines:
    """Makes a double per instance engine, the replacements of instance 1 slow to start."""

    def __init__(
        self, restart_delay: float = 0.0, slow: tuple[int, ...] = (1,), **options: Any
    ) -> None:
        self.by_instance: dict[int, list[FakeEngine]] = {}
        self.restart_delay = restart_delay
        self.slow = slow
        self.options = options

    def __call__(self, spec: ModelSpec) -> FakeEngine:
        engines = self.by_instance.setdefault(spec.instance.index, [])
        delay = self.restart_delay if engines and spec.instance.index in self.slow else 0.0
        engines.append(FakeEngine(start_delay=delay, **self.options))
        return engines[-1]

    def all(self) -> list[FakeEngine]:
        return [engine for engines in self.by_instance.values() for engine in engines]

    def received(self, index: int) -> int:
        return sum(len(engine.requests) for engine in self.by_instance[index])


@pytest.fixture
def two_instances(tmp_path: Path) -> Iterator[Callable[..., tuple[TestClient, InstanceEngines]]]:
    root = tmp_path / "repo"
    write_model(root, "fake", config=TWO_CPU)
    with started_clients() as start:

        def build(
            engines: InstanceEngines | None = None, **settings: Any
        ) -> tuple[TestClient, InstanceEngines]:
            engines = engines or InstanceEngines()
            options = {**FAST_RESTARTS, **EXPLICIT_CONTROL, **settings}
            app = create_app(Settings(model_repository=[root], **options), engine_factory=engines)
            return start(app), engines

        yield build


def registry_of(client: TestClient) -> ModelRegistry:
    return runtime_of(client).registry


def test_a_failed_instance_heals_while_the_other_serves(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the replacement takes 3 s to start: the 4 requests below finish well before on a loaded host
    client, engines = two_instances(InstanceEngines(restart_delay=3.0))
    engines.by_instance[1][0].healthy = False
    assert wait_for(lambda: len(engines.by_instance[1]) == 2)
    model = registry_of(client).get("fake")
    assert [slot.state for slot in model.slots] == [ModelState.READY, ModelState.RESTARTING]
    assert model.state is ModelState.READY
    assert client.get("/v2/health/ready").status_code == 200
    assert client.get("/v2/models/fake/ready").status_code == 200
    for _ in range(4):
        assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200
    assert engines.received(0) == 4 and engines.received(1) == 0
    assert wait_for(lambda: model.slots[1].state is ModelState.READY, timeout=15)
    for _ in range(4):
        assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200
    assert engines.received(1) == 2, "the healed instance serves again"
    assert len(engines.by_instance[0]) == 1, "the healthy instance was left alone"
    assert (
        'server_engine_restarts_total{model="fake",version="1"} 1.0' in client.get("/metrics").text
    )
    assert "model 'fake' version 1 instance fake_1: the engine died" in caplog.text


def test_a_request_waits_for_its_own_instances_replacement(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
) -> None:
    client, engines = two_instances(InstanceEngines(restart_delay=0.2))
    first = engines.by_instance[1][0]
    supervisors = registry_of(client)._supervisors[id(registry_of(client).get("fake"))]
    assert [engines.by_instance[i][0].handover for i in (0, 1)] == supervisors
    (waiting,) = portal_of(client).call(
        lambda: (asyncio.ensure_future(supervisors[1].replacement(first)),)
    )
    first.healthy = False
    assert wait_for(waiting.done)
    assert waiting.result() is engines.by_instance[1][1]


def test_an_instance_out_of_restarts_fails_the_model_and_liveness(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
) -> None:
    client, engines = two_instances(engine_restart_max=0)
    engines.by_instance[0][0].healthy = False
    assert wait_for(lambda: client.get("/v2/health/live").status_code == 503)
    assert registry_of(client).get("fake").state is ModelState.FAILED
    (entry,) = client.post("/v2/repository/index").json()
    assert entry["state"] == "UNAVAILABLE" and "restarts exhausted" in entry["reason"]


def test_while_no_instance_is_ready_the_model_is_restarting(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
) -> None:
    client, engines = two_instances(InstanceEngines(restart_delay=0.5, slow=(0, 1)))
    for index in (0, 1):
        engines.by_instance[index][0].healthy = False
    model = registry_of(client).get("fake")
    assert wait_for(lambda: model.state is ModelState.RESTARTING)
    response = client.post("/v2/models/fake/generate", json=BODY)
    assert response.status_code == 503
    assert response.json() == {"error": "Model is unavailable due to unhealthy vLLM engine"}
    (entry,) = client.post("/v2/repository/index").json()
    assert entry["state"] == "UNAVAILABLE" and "restarting" in entry["reason"]
    assert wait_for(lambda: model.is_ready)


def test_unload_and_reload_cover_every_instance(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
) -> None:
    client, engines = two_instances()
    old = engines.all()
    assert len(old) == 2 and all(engine.started for engine in old)
    assert client.post("/v2/repository/models/fake/load").status_code == 200
    new = [engine for engine in engines.all() if engine not in old]
    assert len(new) == 2 and all(engine.started and not engine.stopped for engine in new)
    assert all(engine.stopped for engine in old)
    assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200
    assert client.post("/v2/repository/models/fake/unload").status_code == 200
    assert all(engine.stopped for engine in engines.all())


async def test_a_drain_lets_requests_finish_then_aborts_each_on_its_instance(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repo"
    write_model(root, "fake", config=TWO_CPU)
    engines = InstanceEngines(step_delay=0.01)
    registry = ModelRegistry(root, engines, options=LifecycleOptions(drain_timeout=2.0))
    await registry.start()
    model = registry.get("fake")

    async def run(request_id: str, max_tokens: int) -> str:
        body = GenerateRequest.model_validate(
            {"text_input": "x", "parameters": {"max_tokens": max_tokens}}
        )
        request = triton_request(body_inputs(body), model, StreamPolicy(default=False)).request
        request.request_id = request_id
        try:
            async for _ in GenerationService().stream(model, request):
                return "done"
        except ServerError as exc:
            return exc.message
        return "nothing"

    sizes = {"short-a": 10, "short-b": 10, "long-a": 2_000, "long-b": 2_000}
    tasks = {rid: asyncio.create_task(run(rid, size)) for rid, size in sizes.items()}
    await asyncio.sleep(0.05)
    assert [slot.admitted for slot in model.slots] == [2, 2]
    await registry.drain()
    results = {rid: await task for rid, task in tasks.items()}
    assert results["short-a"] == results["short-b"] == "done"
    assert results["long-a"] == results["long-b"] == "Request aborted: the server is shutting down"
    aborted = [engines.by_instance[index][0].abort_calls for index in (0, 1)]
    assert sorted(aborted) == [["long-a"], ["long-b"]], "each aborted on its own engine"
    await registry.shutdown()
    assert all(engine.stopped for engine in engines.all())


def test_vllm_series_carry_the_instance_and_an_unload_drops_every_instances() -> None:
    registry = CollectorRegistry()
    metrics = VllmMetrics(registry)
    for instance in ("0", "1"):
        logger = metrics.stat_logger_factory("m", "1", instance)(None, 0)
        logger.record(None, None)
        metrics.prompt_tokens.labels("m", "1", instance).inc(3)
    text = generate_latest(registry).decode()
    assert 'vllm:prompt_tokens_total{instance="1",model="m",version="1"} 3.0' in text
    assert 'vllm:prefix_cache_hits_total{instance="0",model="m",version="1"} 0.0' in text
    metrics.remove("m", "1")
    assert 'model="m"' not in generate_latest(registry).decode()


def test_statistics_stay_per_model_summed_over_instances(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
) -> None:
    client, engines = two_instances()
    for _ in range(4):
        assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200
    assert engines.received(0) == engines.received(1) == 2
    (stats,) = client.get("/v2/models/fake/stats").json()["model_stats"]
    assert stats["inference_stats"]["success"]["count"] == 4
    assert (
        'nv_inference_request_success{model="fake",version="1"} 4.0' in client.get("/metrics").text
    )
