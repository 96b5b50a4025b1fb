"""Multi-node serving without a cluster: the Ray group's readiness with a scripted cluster,
which models join Ray, the RAY_ADDRESS setting, and the repository rules for Ray models."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from vllm.engine.arg_utils import AsyncEngineArgs

from app.engine import engine_args
from app.engine.ray_cluster import LocalGroup, RayGroup, engine_group
from app.errors import EngineUnhealthyError, ModelConfigError
from app.repository.layout import ModelSpec, load_repository
from app.settings import Settings
from tests.support.repository import write_model
from tests.support.waiting import eventually

ADDRESS = "10.0.0.5:6379"
LOCAL_MODEL = str(
    Path(__file__).parent
)  # an existing folder: vLLM never looks a local path up on a hub
POLL = 0.01


class ScriptedCluster:
    """The GPU capacity a cluster offers, set by the test; counts connections."""

    def __init__(self, gpus: float) -> None:
        self.gpus = gpus
        self.unreachable = False
        self.connects: list[str] = []
        self.disconnects = 0

    def capacity(self, resource: str) -> float:
        if self.unreachable:
            raise ConnectionError("GCS unreachable")
        return self.gpus if resource == "GPU" else 0.0

    def connect(self, address: str) -> None:
        self.connects.append(address)

    def disconnect(self) -> None:
        self.disconnects += 1

    def group(self, devices: int = 2) -> RayGroup:
        return RayGroup(
            ADDRESS,
            devices,
            "GPU",
            poll_seconds=POLL,
            capacity=self.capacity,
            connect=self.connect,
            disconnect=self.disconnect,
        )


@pytest.fixture(autouse=True)
def keep_ray_address() -> Iterator[None]:
    before = os.environ.get("RAY_ADDRESS")
    yield
    if before is None:
        os.environ.pop("RAY_ADDRESS", None)
    else:
        os.environ["RAY_ADDRESS"] = before


async def test_start_joins_the_cluster_and_exports_its_address() -> None:
    cluster = ScriptedCluster(gpus=2)
    group = cluster.group()
    await group.start()
    assert group.is_whole and cluster.connects == [ADDRESS]
    assert os.environ["RAY_ADDRESS"] == ADDRESS  # vLLM's engine core joins the same cluster
    group.check()
    await group.stop()
    assert cluster.disconnects == 1


async def test_start_waits_until_the_group_is_whole() -> None:
    cluster = ScriptedCluster(gpus=1)
    group = cluster.group()
    start = asyncio.create_task(group.start())
    await asyncio.sleep(10 * POLL)
    assert not start.done() and not group.is_whole
    cluster.gpus = 2
    await asyncio.wait_for(start, 1)
    assert group.is_whole
    await group.stop()


async def test_a_lost_node_makes_it_unready_until_the_group_is_whole_again() -> None:
    cluster = ScriptedCluster(gpus=2)
    group = cluster.group()
    await group.start()
    cluster.gpus = 1
    assert await eventually(lambda: not group.is_whole)
    with pytest.raises(
        EngineUnhealthyError, match=f"Ray cluster {ADDRESS} offers 1 of the 2 GPU the model needs"
    ):
        group.check()
    rejoined = asyncio.create_task(group.wait_whole())
    await asyncio.sleep(10 * POLL)
    assert not rejoined.done()
    cluster.gpus = 3
    await asyncio.wait_for(rejoined, 1)
    assert group.is_whole
    await group.stop()


async def test_a_cluster_that_does_not_answer_is_not_whole() -> None:
    cluster = ScriptedCluster(gpus=2)
    group = cluster.group()
    await group.start()
    cluster.unreachable = True
    assert await eventually(lambda: not group.is_whole)
    cluster.unreachable = False
    assert await eventually(lambda: group.is_whole)
    await group.stop()


async def test_a_restarted_group_reconnects_and_stop_ends_the_watch() -> None:
    cluster = ScriptedCluster(gpus=2)
    group = cluster.group()
    for _ in range(2):  # as supervision restarts an engine: stop, then start again
        await group.start()
        await group.stop()
    assert cluster.connects == [ADDRESS, ADDRESS] and cluster.disconnects == 2
    cluster.gpus = 0
    await asyncio.sleep(10 * POLL)
    assert group.is_whole, "a stopped group no longer polls"


async def test_the_last_group_of_the_process_disconnects() -> None:
    cluster = ScriptedCluster(gpus=4)
    first, second = cluster.group(), cluster.group()
    await first.start()
    await second.start()
    await first.stop()
    assert cluster.disconnects == 0
    await second.stop()
    assert cluster.disconnects == 1


async def test_an_engine_on_ray_is_healthy_only_while_its_group_stayed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.engine.vllm_engine import VllmEngine

    engine_args = {
        "model": LOCAL_MODEL,
        "distributed_executor_backend": "ray",
        "pipeline_parallel_size": 2,
    }
    engine = VllmEngine(ModelSpec("m", "1", Path("."), engine_args), ray_address=ADDRESS)
    assert isinstance(engine._group, RayGroup) and engine._group.devices == 2
    cluster = ScriptedCluster(gpus=2)
    engine._group = cluster.group()
    await engine._group.start()

    async def healthy() -> None:
        pass

    # a running AsyncLLM
    monkeypatch.setattr(engine, "_llm", SimpleNamespace(errored=False, check_health=healthy))
    assert engine.is_healthy
    await engine.check_health()
    cluster.gpus = 1
    assert await eventually(lambda: not engine.is_healthy)
    with pytest.raises(EngineUnhealthyError, match="offers 1 of the 2 GPU"):
        await engine.check_health()
    cluster.gpus = 2  # the node joins back, but the engine's workers on it are gone
    assert await eventually(lambda: engine._group.is_whole)
    assert not engine.is_healthy
    with pytest.raises(EngineUnhealthyError, match="lost a node since the engine was built"):
        await engine.check_health()
    engine._group.engine_built()  # as a restarted engine, built on the nodes there are now
    assert engine.is_healthy
    await engine._group.stop()


def args(**values: Any) -> AsyncEngineArgs:
    return AsyncEngineArgs(model=LOCAL_MODEL, **values)


def test_only_ray_engines_with_a_known_address_watch_a_group() -> None:
    os.environ.pop("RAY_ADDRESS", None)
    assert isinstance(engine_group(args(), ADDRESS), LocalGroup)
    assert isinstance(engine_group(args(distributed_executor_backend="mp"), ADDRESS), LocalGroup)
    assert isinstance(engine_group(args(distributed_executor_backend="ray"), None), LocalGroup)
    group = engine_group(
        args(distributed_executor_backend="ray", tensor_parallel_size=8, pipeline_parallel_size=2),
        ADDRESS,
    )
    assert isinstance(group, RayGroup)
    assert (group.address, group.devices, group.resource) == (ADDRESS, 16, "GPU")
    os.environ["RAY_ADDRESS"] = "10.0.0.6:6379"
    from_env = engine_group(args(distributed_executor_backend="ray"), None)
    assert isinstance(from_env, RayGroup) and from_env.address == "10.0.0.6:6379"


def test_ray_address_setting_reads_ray_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", ADDRESS)
    assert Settings().ray_address == ADDRESS
    monkeypatch.delenv("RAY_ADDRESS")
    assert Settings().ray_address is None


def test_pipeline_parallel_alone_needs_kind_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the model "x" is not looked up offline
    write_model(
        tmp_path,
        "big",
        config="instance_group [ { kind: KIND_GPU } ]",
        model="x",
        pipeline_parallel_size=2,
        distributed_executor_backend="ray",
    )
    with pytest.raises(ModelConfigError, match="KIND_MODEL"):
        load_repository(tmp_path)
    (tmp_path / "big" / "config.pbtxt").write_text("instance_group [ { kind: KIND_MODEL } ]")
    (spec,) = load_repository(tmp_path, check_engine_args=engine_args.vllm_engine_args)
    assert spec.engine_args["distributed_executor_backend"] == "ray"


def test_a_ray_model_without_ray_installed_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_model(
        tmp_path,
        "big",
        config="instance_group [ { kind: KIND_MODEL } ]",
        model="x",
        pipeline_parallel_size=2,
        distributed_executor_backend="ray",
    )
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the model "x" is not looked up offline
    monkeypatch.setattr("app.engine.engine_args.importlib.util.find_spec", lambda name: None)
    with pytest.raises(
        ModelConfigError, match=r"model.json: distributed_executor_backend 'ray' needs Ray"
    ):
        load_repository(tmp_path, check_engine_args=engine_args.vllm_engine_args)
