"""How many instances (engines) config.pbtxt's `instance_group` may give one model version:
MAX_INSTANCES_PER_MODEL (64), a group's `count` and the groups in all, refused with an error
naming the group before any engine is made, from a load request and at start alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.errors import ModelConfigError
from app.main import create_app
from app.repository.instances import MAX_INSTANCES_PER_MODEL, HostDevices
from app.repository.layout import ModelSpec, load_model
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.repository import EXPLICIT_CONTROL, write_model

LOAD = "/v2/repository/models/m/load"


class RecordingFactory:
    """An engine factory that records the spec of every engine it makes."""

    def __init__(self) -> None:
        self.made: list[ModelSpec] = []

    def __call__(self, spec: ModelSpec) -> FakeEngine:
        self.made.append(spec)
        return FakeEngine()


def load_config(client: TestClient, groups: list[dict[str, object]]) -> tuple[int, str]:
    body = {"parameters": {"config": json.dumps({"instance_group": groups})}}
    response = client.post(LOAD, json=body)
    return response.status_code, response.json().get("error", "") if response.content else ""


def test_the_default_limit_is_64_per_model_version() -> None:
    assert MAX_INSTANCES_PER_MODEL == 64
    assert Settings().max_instances_per_model == 64


def test_a_load_request_with_count_100000_is_refused_before_any_engine_is_made(
    tmp_path: Path,
) -> None:
    write_model(tmp_path, "m")
    factory = RecordingFactory()
    settings = Settings(model_repository=[tmp_path], **EXPLICIT_CONTROL)
    with TestClient(create_app(settings, engine_factory=factory)) as client:
        made_at_start = len(factory.made)
        status, error = load_config(client, [{"kind": "KIND_CPU", "count": 100000}])
        assert status == 400
        assert (
            "config.pbtxt: instance_group 0: count must be at most 64 (this server's "
            "MAX_INSTANCES_PER_MODEL), got 100000"
        ) in error
        assert len(factory.made) == made_at_start
        assert client.get("/v2/models/m/ready").status_code == 200


def test_groups_adding_up_beyond_the_limit_are_refused(tmp_path: Path) -> None:
    write_model(tmp_path, "m")
    factory = RecordingFactory()
    settings = Settings(model_repository=[tmp_path], max_instances_per_model=4, **EXPLICIT_CONTROL)
    with TestClient(create_app(settings, engine_factory=factory)) as client:
        made_at_start = len(factory.made)
        status, error = load_config(client, [{"kind": "KIND_CPU", "count": 3}] * 2)
        assert status == 400
        assert "instance_group: more than 4 instances in all (this server's " in error
        assert load_config(client, [{"kind": "KIND_CPU", "count": 2}] * 2)[0] == 200
        assert len(factory.made) == made_at_start + 4


def test_a_kind_gpu_group_counts_its_count_on_each_listed_gpu(tmp_path: Path) -> None:
    config = "instance_group [{ kind: KIND_GPU count: 3 gpus: [0, 1, 0, 1] }]"
    write_model(tmp_path, "m", config=config)
    with pytest.raises(ModelConfigError, match="more than 8 instances in all") as error:
        load_model(tmp_path / "m", tmp_path, devices=HostDevices(["0", "1"], [0], 8))
    assert "config.pbtxt: instance_group" in str(error.value)
    (spec,) = load_model(tmp_path / "m", tmp_path, devices=HostDevices(["0", "1"], [0], 12))
    assert len(spec.instance_plan) == 12


def test_the_repositorys_own_config_is_bounded_at_start(tmp_path: Path) -> None:
    write_model(tmp_path, "m", config="instance_group [{ kind: KIND_CPU count: 65 }]")
    factory = RecordingFactory()
    with pytest.raises(ModelConfigError, match="instance_group 0: count must be at most 64"):
        create_app(Settings(model_repository=[tmp_path]), engine_factory=factory)
    assert factory.made == []
