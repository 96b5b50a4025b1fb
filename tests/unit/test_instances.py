"""config.pbtxt's `instance_group` as the vLLM backend reads it: kinds, counts, GPUs (faked
here: no GPU host needed), the CPU cores shared out, the errors naming config.pbtxt, and the
environment each instance's engine processes start with."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from app.engine.placement import instance_environment, starting_on
from app.errors import ModelConfigError
from app.repository.instances import (
    MULTI_GPU_MESSAGE,
    HostDevices,
    InstanceKind,
    ModelInstance,
    split_cores,
    visible_gpus,
)
from app.repository.layout import ModelSpec, load_model
from app.repository.registry import ModelRegistry
from tests.doubles import FakeEngine
from tests.support.repository import write_model

TWO_GPUS = HostDevices(gpus=["0", "1"], cpus=[0, 1, 2, 3])
NO_GPU = HostDevices(gpus=[], cpus=[0, 1, 2, 3])
SPAWNED = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}


def instances(
    tmp_path: Path, config: str, devices: HostDevices = TWO_GPUS, **engine_args: Any
) -> tuple[ModelInstance, ...]:
    write_model(tmp_path, "m", config=config, **(engine_args or {"model": "x"}))
    (spec,) = load_model(tmp_path / "m", tmp_path, devices=devices)
    return spec.instance_plan


def places(found: tuple[ModelInstance, ...]) -> list[tuple[str, str, str | None, tuple[int, ...]]]:
    return [(i.name, i.kind.value, i.gpu, i.cpus) for i in found]


def test_no_instance_group_is_one_kind_model_engine(tmp_path: Path) -> None:
    assert places(instances(tmp_path, 'backend: "vllm"')) == [("m_0", "KIND_MODEL", None, ())]


def test_kind_gpu_is_one_engine_per_listed_gpu_count_per_gpu(tmp_path: Path) -> None:
    found = instances(tmp_path, "instance_group [{ kind: KIND_GPU count: 2 gpus: [1, 0] }]")
    assert [(i.index, i.gpu) for i in found] == [(0, "1"), (1, "1"), (2, "0"), (3, "0")]
    assert [i.name for i in found] == ["m_0", "m_1", "m_2", "m_3"]
    assert [instance_environment(i) for i in found[1:3]] == [
        {"CUDA_VISIBLE_DEVICES": "1", **SPAWNED},
        {"CUDA_VISIBLE_DEVICES": "0", **SPAWNED},
    ]


def test_kind_gpu_without_gpus_takes_every_visible_gpu(tmp_path: Path) -> None:
    found = instances(tmp_path, "instance_group [{ kind: KIND_GPU }]")
    assert [(i.kind, i.gpu) for i in found] == [(InstanceKind.GPU, "0"), (InstanceKind.GPU, "1")]


def test_gpu_ids_are_those_cuda_visible_devices_leaves() -> None:
    assert visible_gpus(None, 2) == ("0", "1")
    assert visible_gpus("3,1", 8) == ("3", "1")
    assert visible_gpus("GPU-abc, 2,-1,4", 8) == ("GPU-abc", "2")
    assert visible_gpus("", 2) == ()


def test_groups_add_up_and_cpu_instances_share_out_the_cores(tmp_path: Path) -> None:
    config = (
        "instance_group [{ kind: KIND_CPU count: 2 }, { kind: KIND_MODEL },"
        " { kind: KIND_CPU }, { kind: KIND_GPU gpus: [1] }]"
    )
    assert places(instances(tmp_path, config)) == [
        ("m_0", "KIND_CPU", None, (0, 1)),
        ("m_1", "KIND_CPU", None, (2,)),
        ("m_2", "KIND_MODEL", None, ()),
        ("m_3", "KIND_CPU", None, (3,)),
        ("m_4", "KIND_GPU", "1", ()),
    ]


def test_cores_are_split_evenly_and_reused_round_robin_when_too_few() -> None:
    assert split_cores([0, 1, 2, 3, 4], 2) == [(0, 1, 2), (3, 4)]
    assert split_cores([4, 5], 2) == [(4,), (5,)]
    assert split_cores([0, 1], 5) == [(0,), (1,), (0,), (1,), (0,)]
    assert split_cores([7], 1) == [(7,)]


def test_one_cpu_instance_keeps_vllms_own_thread_binding(tmp_path: Path) -> None:
    (only,) = instances(tmp_path, "instance_group [{ kind: KIND_CPU }]")
    assert only.kind is InstanceKind.CPU and only.cpus == ()
    assert instance_environment(only) == SPAWNED


def test_cpu_instances_bind_their_engines_threads(tmp_path: Path) -> None:
    found = instances(tmp_path, "instance_group [{ kind: KIND_CPU count: 2 }]")
    assert [instance_environment(i) for i in found] == [
        {"VLLM_CPU_OMP_THREADS_BIND": "0,1", **SPAWNED},
        {"VLLM_CPU_OMP_THREADS_BIND": "2,3", **SPAWNED},
    ]


def test_engine_processes_are_spawned_unless_the_environment_says_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `vllm serve` starts them: a core forked from a serving process starts with its state."""
    (only,) = instances(tmp_path, 'backend: "vllm"')
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    with starting_on(only):
        assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in os.environ
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")
    with starting_on(only):
        assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"


def test_kind_auto_is_gpu_where_there_are_gpus_else_cpu(tmp_path: Path) -> None:
    assert instances(tmp_path, "instance_group [{ count: 1 }]")[0].kind is InstanceKind.GPU
    assert instances(tmp_path, "instance_group [{ count: 1 }]", NO_GPU)[0].kind is InstanceKind.CPU


@pytest.mark.parametrize(
    ("config", "devices", "message"),
    [
        ("instance_group [{ kind: KIND_CPU count: -1 }]", TWO_GPUS, "count must be at least 1"),
        ("instance_group [{ kind: KIND_GPU }]", NO_GPU, "KIND_GPU, but this host has no GPU"),
        (
            "instance_group [{ kind: KIND_GPU gpus: [0, 2] }]",
            TWO_GPUS,
            "no GPU 2 on this host (its GPUs: 0, 1)",
        ),
        ("instance_group [{ kind: KIND_CPU gpus: [0] }]", TWO_GPUS, "KIND_CPU takes no `gpus`"),
        ("instance_group [{ kind: KIND_MODEL gpus: [0] }]", TWO_GPUS, "KIND_MODEL takes no"),
    ],
)
def test_nonsense_is_an_error_naming_config_pbtxt(
    tmp_path: Path, config: str, devices: HostDevices, message: str
) -> None:
    with pytest.raises(ModelConfigError, match=r"config\.pbtxt: instance_group 0") as error:
        instances(tmp_path, config, devices)
    assert message in str(error.value)


@pytest.mark.parametrize("parallel", ["tensor_parallel_size", "pipeline_parallel_size"])
def test_kind_gpu_with_several_devices_per_engine_is_the_backends_error(
    tmp_path: Path, parallel: str
) -> None:
    engine_args: dict[str, Any] = {"model": "x", parallel: 2}
    with pytest.raises(ModelConfigError) as error:
        instances(tmp_path, "instance_group [{ kind: KIND_GPU }]", **engine_args)
    assert str(error.value).endswith(f"config.pbtxt: {MULTI_GPU_MESSAGE}")
    assert MULTI_GPU_MESSAGE == (
        "KIND_GPU is currently for single-GPU models, please specify KIND_MODEL in the "
        "model's config.pbtxt for multi-GPU models"
    )
    with pytest.raises(ModelConfigError, match="please specify KIND_MODEL"):
        instances(tmp_path, "instance_group [{ kind: KIND_CPU }]", **engine_args)
    found = instances(tmp_path, "instance_group [{ kind: KIND_MODEL }]", **engine_args)
    assert places(found) == [("m_0", "KIND_MODEL", None, ())]


@pytest.mark.parametrize(
    ("parameter", "value", "message"),
    [
        (
            "INSTANCE_ROUTING",
            "random",
            "INSTANCE_ROUTING must be 'least_loaded' or 'cache_aware' or 'prefix', got 'random'",
        ),
        ("INSTANCE_ROUTING_PREFIX_TOKENS", "8", "INSTANCE_ROUTING_PREFIX_TOKENS must be"),
        ("INSTANCE_ROUTING_BUSY_MARGIN", "-1", "INSTANCE_ROUTING_BUSY_MARGIN must be"),
        ("INSTANCE_ROUTING_HIT_TOKENS", "0", "INSTANCE_ROUTING_HIT_TOKENS must be an integer of"),
        ("INSTANCE_ROUTING_LOAD_VIEW", "x", "INSTANCE_ROUTING_LOAD_VIEW must be 'engine' or"),
    ],
)
def test_routing_parameters_are_checked(
    tmp_path: Path, parameter: str, value: str, message: str
) -> None:
    config = f'parameters {{ key: "{parameter}" value: {{ string_value: "{value}" }} }}'
    with pytest.raises(ModelConfigError, match=r"config\.pbtxt: ") as error:
        instances(tmp_path, config)
    assert message in str(error.value)


def test_a_load_request_with_a_bad_instance_group_is_a_400_naming_config_pbtxt(
    tmp_path: Path,
) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    write_model(tmp_path, "m", config="instance_group [{ kind: KIND_CPU count: 2 }]")
    settings = Settings(model_repository=[tmp_path], model_control_mode="explicit")
    config = {"instance_group": [{"kind": "KIND_CPU", "count": -2}]}
    with TestClient(create_app(settings, engine_factory=lambda spec: FakeEngine())) as client:
        body = {"parameters": {"config": json.dumps(config)}}
        response = client.post("/v2/repository/models/m/load", json=body)
    assert response.status_code == 400
    assert "config.pbtxt: instance_group 0: count must be at least 1" in response.json()["error"]


def test_each_instance_gets_its_own_engine_placed_on_the_faked_gpus(tmp_path: Path) -> None:
    write_model(tmp_path, "m", config="instance_group [{ kind: KIND_GPU count: 2 }]")
    made: list[ModelSpec] = []

    def factory(spec: ModelSpec) -> FakeEngine:
        made.append(spec)
        return FakeEngine()

    registry = ModelRegistry(tmp_path, factory, devices=TWO_GPUS)
    served = registry.get("m")
    assert len(served.slots) == 4 and served.engines == [slot.engine for slot in served.slots]
    assert [(spec.instance.name, spec.instance.gpu) for spec in made] == [
        ("m_0", "0"),
        ("m_1", "0"),
        ("m_2", "1"),
        ("m_3", "1"),
    ]


def test_engine_processes_start_with_their_instances_environment_then_it_is_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    gpu = ModelInstance(1, "m_1", InstanceKind.GPU, gpu="1")
    cpu = ModelInstance(2, "m_2", InstanceKind.CPU, cpus=(2, 3))
    with starting_on(gpu):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    with starting_on(cpu):
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "2,3"
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ


def test_instance_placement_travels_to_the_supervising_process_as_json() -> None:
    instance = ModelInstance(1, "m_1", InstanceKind.CPU, cpus=(2, 3))
    assert ModelInstance.from_json(instance.to_json()) == instance
