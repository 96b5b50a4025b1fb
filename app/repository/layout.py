"""Reads a Triton model repository laid out for the vLLM backend.

<repository>/<model>/config.pbtxt            optional, Triton's model configuration
<repository>/<model>/configs/<name>.pbtxt   its configuration with --model-config-name=<name>
<repository>/<model>/<version>/model.json    vLLM engine arguments
<repository>/<model>/<version>/multi_lora.json   adapters, when `enable_lora` is true
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from app.core.routing import RoutingPolicy
from app.errors import ModelConfigError
from app.paths import PROJECT_ROOT
from app.repository.config_file import CONFIG_FILE, config_path
from app.repository.instances import HostDevices, ModelInstance, plan_instances, routing_policy
from app.security.load_overrides import (
    check_client_adapter,
    check_client_engine_args,
    check_client_parameters,
)

ENGINE_ARGS_FILE = "model.json"
LORA_FILE = "multi_lora.json"
PATH_ENGINE_ARGS = ("model", "tokenizer")

EngineArgsCheck = Callable[[dict[str, Any], Path], dict[str, Any]]
"""Checks a model.json's engine arguments for the engine that will run them (raising
`ModelConfigError` naming the file) and returns them as that engine takes them."""
ENGINE_NOTES = "__engine_notes__"
"""Where an `EngineArgsCheck` returns the arguments it chose for this host where model.json
leaves them unset (name -> value and why): taken out into `ModelSpec.engine_notes`."""


def accept_engine_args(engine_args: dict[str, Any], path: Path) -> dict[str, Any]:
    """No engine-specific check (the engine doubles of the tests)."""
    return engine_args


@dataclass(frozen=True)
class Provenance:
    """Which of a model's files a client's load request gave instead of the repository:
    those are held to app/security/load_overrides.py's rules."""

    config: bool = False
    files: bool = False


REPOSITORY_FILES = Provenance()


@dataclass(frozen=True)
class ModelSpec:
    """One version of one model, as read from the repository."""

    name: str
    version: str
    version_path: Path
    engine_args: dict[str, Any]
    loras: dict[str, Path] | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    config: Message = field(default_factory=model_config_pb2.ModelConfig)
    engine_notes: dict[str, str] = field(default_factory=dict)
    """Engine arguments chosen for this host (name -> value and why), shown in the config."""
    instances: tuple[ModelInstance, ...] = ()
    """Its instances (config.pbtxt's `instance_group`), each an engine; none given: one."""
    routing: RoutingPolicy = field(default_factory=RoutingPolicy)
    config_file: str = CONFIG_FILE
    """The file `config` was read from, relative to the model's folder (`configs/<name>.pbtxt`
    with --model-config-name)."""

    @property
    def config_path(self) -> Path:
        """The model's configuration file (it may be absent: the default configuration)."""
        return self.version_path.parent / self.config_file

    @property
    def instance_plan(self) -> tuple[ModelInstance, ...]:
        return self.instances or (ModelInstance(0, f"{self.name}_0"),)

    @property
    def instance(self) -> ModelInstance:
        """The instance an engine made from this spec serves (`for_instance`)."""
        return self.instance_plan[0]

    def for_instance(self, instance: ModelInstance) -> ModelSpec:
        """This spec as the engine of one of its instances sees it."""
        if self.instance_plan == (instance,):
            return self
        return dataclasses.replace(self, instances=(instance,))

    def flag(self, key: str) -> bool:
        """A boolean `parameters` entry of config.pbtxt ("true", any case)."""
        return self.parameters.get(key, "").strip().lower() == "true"


def load_repository(
    root: Path,
    only: Collection[str] | None = None,
    check_engine_args: EngineArgsCheck = accept_engine_args,
    devices: HostDevices | None = None,
    config_name: str | None = None,
) -> list[ModelSpec]:
    """Every version to serve from `root`, restricted to the model names in `only` (None:
    every model); instances are placed on `devices` (default: this host's); `config_name`:
    Triton's --model-config-name."""
    root = root.resolve()
    if not root.is_dir():
        raise ModelConfigError(f"model repository {root} is not a directory")
    wanted = set(only or ())
    specs = [
        spec
        for name in model_names(root)
        if only is None or name in wanted
        for spec in load_model(
            root / name, root, check_engine_args, devices=devices, config_name=config_name
        )
    ]
    missing = wanted - {spec.name for spec in specs}
    if missing:
        raise ModelConfigError(f"models {sorted(missing)} not found in repository {root}")
    return specs


def model_names(root: Path) -> list[str]:
    """Folders of the repository, each a model."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


DUPLICATE_REASON = "model appears in two or more repositories"
"""Triton's reason for a model whose folder is in several repositories (it serves none)."""


def model_folders(roots: Sequence[Path]) -> tuple[dict[str, Path], set[str]]:
    """Each model's folder across the repositories, and the names found in more than one
    (Triton serves neither copy of those)."""
    folders: dict[str, Path] = {}
    duplicates: set[str] = set()
    for root in roots:
        for name in model_names(root):
            if name in folders:
                duplicates.add(name)
            folders.setdefault(name, root / name)
    for name in duplicates:
        del folders[name]
    return folders, duplicates


def load_model(
    model_dir: Path,
    root: Path,
    check_engine_args: EngineArgsCheck = accept_engine_args,
    provenance: Provenance = REPOSITORY_FILES,
    devices: HostDevices | None = None,
    config_name: str | None = None,
) -> list[ModelSpec]:
    """The versions of one model that its version policy selects, with their instances placed
    on `devices` (default: this host's). With `config_name` (Triton's --model-config-name) the
    model is configured from `configs/<config_name>.pbtxt` where it has one; a client's config
    (`provenance.config`) is always its config.pbtxt, as in Triton."""
    if not model_dir.is_dir():
        raise ModelConfigError(
            f"failed to load '{model_dir.name}': no such model in the repository"
        )
    path = config_path(model_dir, None if provenance.config else config_name)
    config = parse_config_file(path)
    name = config.name or model_dir.name
    if name != model_dir.name:
        raise ModelConfigError(f"{path}: name '{name}' differs from its folder '{model_dir.name}'")
    available = sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    versions = select_versions(config, available)
    if not versions:
        raise ModelConfigError(f"model '{name}' in {model_dir} has no version to serve")
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    if provenance.config:
        check_client_parameters(parameters, model_dir)
    devices = devices or HostDevices()
    return [
        read_version(
            name,
            model_dir / str(version),
            root,
            config,
            parameters,
            check_engine_args,
            provenance,
            devices,
            path.relative_to(model_dir).as_posix(),
        )
        for version in versions
    ]


@dataclass(frozen=True)
class ModelReader:
    """How a server reads its models' folders: the engine-argument check, the devices their
    instances are placed on, and Triton's --model-config-name (`config_name`)."""

    check_engine_args: EngineArgsCheck = accept_engine_args
    devices: HostDevices | None = None
    config_name: str | None = None

    def read(
        self, model_dir: Path, root: Path, provenance: Provenance = REPOSITORY_FILES
    ) -> list[ModelSpec]:
        """The versions to serve of the model in `model_dir` (`load_model`)."""
        return load_model(
            model_dir, root, self.check_engine_args, provenance, self.devices, self.config_name
        )


def read_config(model_dir: Path, config_name: str | None = None) -> Message:
    """The configuration of the model in `model_dir` (`config_name`: --model-config-name)."""
    return parse_config_file(config_path(model_dir, config_name))


def parse_config_file(path: Path) -> Message:
    """Parse a config.pbtxt with protobuf's text format into Triton's `ModelConfig` (an empty
    one where the file is absent)."""
    config = model_config_pb2.ModelConfig()
    if path.is_file():
        try:
            text_format.Parse(path.read_text(), config)
        except text_format.ParseError as exc:
            raise ModelConfigError(f"{path}: {exc}") from exc
    return config


def select_versions(config: Message, available: list[int]) -> list[int]:
    """Apply Triton's version policy (default: the latest one)."""
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return available
    if choice == "specific":
        return [v for v in available if v in set(policy.specific.versions)]
    count = policy.latest.num_versions if choice == "latest" else 1
    return available[-max(count, 1) :]


def read_version(
    name: str,
    version_path: Path,
    root: Path,
    config: Message,
    parameters: dict[str, str],
    check_engine_args: EngineArgsCheck,
    provenance: Provenance = REPOSITORY_FILES,
    devices: HostDevices | None = None,
    config_file: str = CONFIG_FILE,
) -> ModelSpec:
    """Read model.json (and multi_lora.json) of one version folder; place its instances
    (`config_file`: where `config` came from, relative to the model's folder)."""
    path = version_path / ENGINE_ARGS_FILE
    engine_args = read_json_object(path)
    if provenance.files:
        engine_args = check_client_engine_args(engine_args, version_path)
    engine_args = check_engine_args(engine_args, path)
    engine_notes = engine_args.pop(ENGINE_NOTES, {})
    path_of_config = version_path.parent / config_file
    instances = plan_instances(name, config, engine_args, path_of_config, devices or HostDevices())
    for key in PATH_ENGINE_ARGS:
        if isinstance(engine_args.get(key), str) and not provenance.files:
            engine_args[key] = resolve_model_path(engine_args[key], version_path)
    loras = None
    if str(engine_args.get("enable_lora", "")).lower() == "true":
        engine_args["enable_lora"] = True
        loras = read_loras(version_path, root, provenance)
    return ModelSpec(
        name=name,
        version=version_path.name,
        version_path=version_path,
        engine_args=engine_args,
        loras=loras,
        parameters=parameters,
        config=config,
        engine_notes=engine_notes,
        instances=instances,
        routing=routing_policy(parameters, path_of_config),
        config_file=config_file,
    )


def read_json_object(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelConfigError(f"{path} is missing: each version folder needs one")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: expected a JSON object")
    return data


def resolve_model_path(value: str, version_path: Path) -> str:
    """A relative path is looked up next to model.json, then from the project root.

    Anything found in neither place (e.g. a Hugging Face model id) is passed unchanged.
    """
    candidate = Path(value).expanduser()
    if candidate.is_absolute():
        return str(candidate)
    for base in (version_path, PROJECT_ROOT):
        if (base / candidate).exists():
            return str((base / candidate).resolve())
    return value


def read_loras(
    version_path: Path, root: Path, provenance: Provenance = REPOSITORY_FILES
) -> dict[str, Path]:
    """multi_lora.json: adapter name -> folder; relative folders may not leave the repository
    (nor the model's folder, for a client's file)."""
    path = version_path / LORA_FILE
    if not path.is_file():
        raise ModelConfigError(f"{path} is missing: `enable_lora` is true in {ENGINE_ARGS_FILE}")
    entries = read_json_object(path)
    loras = {}
    for name, folder in entries.items():
        if not isinstance(folder, str):
            raise ModelConfigError(f"{path}: adapter '{name}' must map to a folder path")
        if provenance.files:
            loras[name] = check_client_adapter(folder, version_path, name)
            continue
        adapter = Path(folder)
        if not adapter.is_absolute():
            adapter = (version_path / adapter).resolve()
            if not adapter.is_relative_to(root):
                raise ModelConfigError(f"{path}: adapter '{name}' points outside the repository")
        loras[name] = adapter
    return loras
