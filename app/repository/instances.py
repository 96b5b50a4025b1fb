"""A model's instances, from config.pbtxt's `instance_group` read as the Triton vLLM backend
reads it: one engine per instance. KIND_MODEL (the default): an engine spanning the GPUs its
parallel sizes need; KIND_GPU: an engine on one GPU each, `count` per GPU of `gpus` (default:
every visible GPU); KIND_CPU: `count` CPU engines sharing out the cores. Groups add up; the
instances are numbered in order and named `<model>_<index>`, as Triton names them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from app.core.routing import BLOCK_TOKENS, LoadView, RoutingMode, RoutingPolicy
from app.errors import ModelConfigError

GROUP = model_config_pb2.ModelInstanceGroup
ROUTING_PARAMETER = "INSTANCE_ROUTING"
PREFIX_TOKENS_PARAMETER = "INSTANCE_ROUTING_PREFIX_TOKENS"
BUSY_MARGIN_PARAMETER = "INSTANCE_ROUTING_BUSY_MARGIN"
HIT_TOKENS_PARAMETER = "INSTANCE_ROUTING_HIT_TOKENS"
LOAD_VIEW_PARAMETER = "INSTANCE_ROUTING_LOAD_VIEW"
MAX_INSTANCES_PER_MODEL = 64
"""The most instances (engines) one model version may have, unless the server says otherwise."""
MULTI_GPU_MESSAGE = (
    "KIND_GPU is currently for single-GPU models, please specify KIND_MODEL in the model's "
    "config.pbtxt for multi-GPU models"
)
"""The backend's refusal of a KIND_GPU model with tensor × pipeline parallel size > 1."""
Choice = TypeVar("Choice", RoutingMode, LoadView)


class InstanceKind(str, Enum):
    MODEL = "KIND_MODEL"
    GPU = "KIND_GPU"
    CPU = "KIND_CPU"


@dataclass(frozen=True)
class ModelInstance:
    """One instance of a model version: its engine's place on the host."""

    index: int
    name: str
    kind: InstanceKind = InstanceKind.MODEL
    gpu: str | None = None
    """KIND_GPU: its GPU, as CUDA_VISIBLE_DEVICES names it in the server's environment."""
    cpus: tuple[int, ...] = ()
    """KIND_CPU with several CPU instances: the cores its engine's threads are bound to."""

    def to_json(self) -> dict[str, Any]:
        """As JSON (to the supervising process that starts the engine cores)."""
        return {**asdict(self), "kind": self.kind.value, "cpus": list(self.cpus)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelInstance:
        return cls(**{**data, "kind": InstanceKind(data["kind"]), "cpus": tuple(data["cpus"])})

    def describe(self) -> str:
        """Its kind and place, for logs: `KIND_GPU, GPU 1`, `KIND_CPU, cores 0,1`."""
        if self.gpu is not None:
            return f"{self.kind.value}, GPU {self.gpu}"
        if self.cpus:
            return f"{self.kind.value}, cores {','.join(map(str, self.cpus))}"
        return self.kind.value


class HostDevices:
    """The GPUs and cores instances are placed on: given (a test's fake), or read from this
    host when first needed (NVML only for a KIND_GPU or KIND_AUTO group); and how many
    instances one model version may have here."""

    def __init__(
        self,
        gpus: Sequence[str] | None = None,
        cpus: Sequence[int] | None = None,
        max_instances: int = MAX_INSTANCES_PER_MODEL,
    ):
        self.max_instances = max_instances
        if gpus is not None:
            self.gpus = tuple(gpus)
        if cpus is not None:
            self.cpus = tuple(cpus)

    @cached_property
    def gpus(self) -> tuple[str, ...]:
        """Each GPU the server sees, in CUDA's order: gpu id i of config.pbtxt is gpus[i]."""
        return visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), nvml_gpu_count())

    @cached_property
    def cpus(self) -> tuple[int, ...]:
        """The cores this process may run on."""
        return tuple(sorted(os.sched_getaffinity(0)))


def nvml_gpu_count() -> int:
    """How many GPUs NVML reports (0 without a driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML library, no driver: no GPU
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def visible_gpus(selection: str | None, count: int) -> tuple[str, ...]:
    """The GPUs CUDA_VISIBLE_DEVICES (`selection`) leaves of `count`, as it names them (CUDA
    stops at the first negative entry)."""
    if selection is None:
        return tuple(str(index) for index in range(count))
    entries = []
    for entry in (item.strip() for item in selection.split(",")):
        if not entry or entry.startswith("-"):
            break
        entries.append(entry)
    return tuple(entries[:count])


def split_cores(cores: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """`count` shares of `cores`, contiguous and as even as can be; with fewer cores than
    shares, one core each, taken round-robin."""
    if len(cores) < count:
        return [(cores[index % len(cores)],) for index in range(count)]
    size, extra = divmod(len(cores), count)
    shares, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        shares.append(tuple(cores[start:end]))
        start = end
    return shares


def plan_instances(
    name: str, config: Message, engine_args: Mapping[str, Any], path: Path, devices: HostDevices
) -> tuple[ModelInstance, ...]:
    """The instances config.pbtxt (`path`) declares, each placed; a `ModelConfigError` naming
    the file for a group that cannot be served here, or for more instances in all than
    `devices.max_instances` (before any engine is made)."""
    parallel = int(engine_args.get("tensor_parallel_size", 1)) * int(
        engine_args.get("pipeline_parallel_size", 1)
    )
    groups = list(config.instance_group) or [GROUP(kind=GROUP.KIND_MODEL, count=1)]
    places: list[tuple[InstanceKind, str | None]] = []
    limit = devices.max_instances
    for number, group in enumerate(groups):
        if group.count > limit:
            raise ModelConfigError(
                f"{path}: instance_group {number}: count must be at most {limit} (this "
                f"server's MAX_INSTANCES_PER_MODEL), got {group.count}"
            )
        places += group_places(group, number, parallel, path, devices)
        if len(places) > limit:
            raise ModelConfigError(
                f"{path}: instance_group: more than {limit} instances in all (this server's "
                f"MAX_INSTANCES_PER_MODEL)"
            )
    cpu_count = sum(kind is InstanceKind.CPU for kind, _ in places)
    shares = iter(split_cores(devices.cpus, cpu_count) if cpu_count > 1 else [])
    return tuple(
        ModelInstance(
            index,
            f"{name}_{index}",
            kind,
            gpu,
            next(shares) if kind is InstanceKind.CPU and cpu_count > 1 else (),
        )
        for index, (kind, gpu) in enumerate(places)
    )


def group_places(
    group: Message, number: int, parallel: int, path: Path, devices: HostDevices
) -> list[tuple[InstanceKind, str | None]]:
    """The kind and GPU of each instance of one `instance_group` entry."""
    where = f"{path}: instance_group {number}"
    if group.count < 0:
        raise ModelConfigError(f"{where}: count must be at least 1, got {group.count}")
    count = group.count or 1  # unset: Triton's default of one instance
    kind = group_kind(group, devices)
    if kind is InstanceKind.MODEL:
        no_gpus(group, kind, where)
        return [(kind, None)] * count
    if parallel > 1 and kind is InstanceKind.GPU:
        raise ModelConfigError(f"{path}: {MULTI_GPU_MESSAGE}")
    if parallel > 1:
        raise ModelConfigError(
            f"{path}: KIND_CPU runs one single-device engine per instance, please specify "
            "KIND_MODEL in the model's config.pbtxt for tensor/pipeline parallel models"
        )
    if kind is InstanceKind.CPU:
        no_gpus(group, kind, where)
        return [(kind, None)] * count
    return [(kind, gpu) for gpu in group_gpus(group, where, devices) for _ in range(count)]


def group_kind(group: Message, devices: HostDevices) -> InstanceKind:
    """The group's kind; KIND_AUTO is KIND_GPU where there are GPUs, else KIND_CPU (Triton's)."""
    if group.kind == GROUP.KIND_AUTO:
        return InstanceKind.GPU if devices.gpus else InstanceKind.CPU
    return InstanceKind(GROUP.Kind.Name(group.kind))


def no_gpus(group: Message, kind: InstanceKind, where: str) -> None:
    if group.gpus:
        raise ModelConfigError(f"{where}: {kind.value} takes no `gpus` (KIND_GPU does)")


def group_gpus(group: Message, where: str, devices: HostDevices) -> list[str]:
    """The GPUs of a KIND_GPU group, as CUDA_VISIBLE_DEVICES names them."""
    if not devices.gpus:
        raise ModelConfigError(
            f"{where}: KIND_GPU, but this host has no GPU (use KIND_CPU or KIND_MODEL)"
        )
    ids = list(group.gpus) or list(range(len(devices.gpus)))
    for gpu in ids:
        if not 0 <= gpu < len(devices.gpus):
            known = ", ".join(map(str, range(len(devices.gpus))))
            raise ModelConfigError(f"{where}: no GPU {gpu} on this host (its GPUs: {known})")
    return [devices.gpus[gpu] for gpu in ids]


def routing_policy(parameters: Mapping[str, str], path: Path) -> RoutingPolicy:
    """The model's routing between its instances, from config.pbtxt's `parameters`."""
    mode = choice(parameters, ROUTING_PARAMETER, RoutingMode, RoutingMode.LEAST_LOADED, path)
    load_view = choice(parameters, LOAD_VIEW_PARAMETER, LoadView, LoadView.ENGINE, path)
    defaults = RoutingPolicy()
    tokens = integer(parameters, PREFIX_TOKENS_PARAMETER, 0, BLOCK_TOKENS, path)
    return RoutingPolicy(
        mode,
        prefix_tokens=tokens or None,
        busy_margin=integer(parameters, BUSY_MARGIN_PARAMETER, defaults.busy_margin, 0, path),
        hit_tokens=integer(parameters, HIT_TOKENS_PARAMETER, defaults.hit_tokens, 1, path),
        load_view=load_view,
    )


def choice(
    parameters: Mapping[str, str], key: str, kind: type[Choice], default: Choice, path: Path
) -> Choice:
    """A parameter naming one of an enumeration's values (any case)."""
    text = parameters.get(key, default.value).strip().lower()
    if text not in {member.value for member in kind}:
        known = " or ".join(f"'{member.value}'" for member in kind)
        raise ModelConfigError(f"{path}: {key} must be {known}, got '{text[:40]}'")
    return kind(text)


def integer(parameters: Mapping[str, str], key: str, default: int, least: int, path: Path) -> int:
    text = parameters.get(key, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < least:
        raise ModelConfigError(
            f"{path}: {key} must be an integer of at least {least}, got '{text[:40]}'"
        )
    return int(text)
