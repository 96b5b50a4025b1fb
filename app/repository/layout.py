"""Reads a Triton model repository laid out for the vLLM backend.

    <repository>/<model>/config.pbtxt            optional, Triton's model configuration
    <repository>/<model>/<version>/model.json    vLLM engine arguments
    <repository>/<model>/<version>/multi_lora.json   adapters, when `enable_lora` is true
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from app.errors import ModelConfigError
from app.paths import PROJECT_ROOT

ENGINE_ARGS_FILE = "model.json"
LORA_FILE = "multi_lora.json"
CONFIG_FILE = "config.pbtxt"
PATH_ENGINE_ARGS = ("model", "tokenizer")

EngineArgsCheck = Callable[[dict[str, Any], Path], dict[str, Any]]
"""Checks a model.json's engine arguments for the engine that will run them (raising
`ModelConfigError` naming the file) and returns them as that engine takes them."""


def accept_engine_args(engine_args: dict[str, Any], path: Path) -> dict[str, Any]:
    """No engine-specific check (the engine doubles of the tests)."""
    return engine_args


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

    def flag(self, key: str) -> bool:
        """A boolean `parameters` entry of config.pbtxt ("true", any case)."""
        return self.parameters.get(key, "").strip().lower() == "true"


def load_repository(
    root: Path, only: list[str] | None = None, check_engine_args: EngineArgsCheck = accept_engine_args
) -> list[ModelSpec]:
    """Every version to serve from `root`, restricted to the model names in `only`."""
    root = root.resolve()
    if not root.is_dir():
        raise ModelConfigError(f"model repository {root} is not a directory")
    wanted = set(only or ())
    specs = [
        spec
        for name in model_names(root)
        if not wanted or name in wanted
        for spec in load_model(root / name, root, check_engine_args)
    ]
    missing = wanted - {spec.name for spec in specs}
    if missing:
        raise ModelConfigError(f"models {sorted(missing)} not found in repository {root}")
    return specs


def model_names(root: Path) -> list[str]:
    """Folders of the repository, each a model."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_model(
    model_dir: Path, root: Path, check_engine_args: EngineArgsCheck = accept_engine_args
) -> list[ModelSpec]:
    """The versions of one model that its version policy selects."""
    if not model_dir.is_dir():
        raise ModelConfigError(f"failed to load '{model_dir.name}': no such model in the repository")
    config = read_config(model_dir)
    name = config.name or model_dir.name
    if name != model_dir.name:
        raise ModelConfigError(
            f"{model_dir / CONFIG_FILE}: name '{name}' differs from its folder '{model_dir.name}'"
        )
    available = sorted(
        int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()
    )
    versions = select_versions(config, available)
    if not versions:
        raise ModelConfigError(f"model '{name}' in {model_dir} has no version to serve")
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    return [
        read_version(name, model_dir / str(version), root, config, parameters, check_engine_args)
        for version in versions
    ]


def read_config(model_dir: Path) -> Message:
    """Parse config.pbtxt with protobuf's text format into Triton's `ModelConfig`."""
    config = model_config_pb2.ModelConfig()
    path = model_dir / CONFIG_FILE
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
) -> ModelSpec:
    """Read model.json (and multi_lora.json) of one version folder."""
    path = version_path / ENGINE_ARGS_FILE
    engine_args = check_engine_args(read_json_object(path), path)
    check_instance_kind(config, engine_args, version_path.parent / CONFIG_FILE)
    for key in PATH_ENGINE_ARGS:
        if isinstance(engine_args.get(key), str):
            engine_args[key] = resolve_model_path(engine_args[key], version_path)
    loras = None
    if str(engine_args.get("enable_lora", "")).lower() == "true":
        engine_args["enable_lora"] = True
        loras = read_loras(version_path, root)
    return ModelSpec(
        name=name,
        version=version_path.name,
        version_path=version_path,
        engine_args=engine_args,
        loras=loras,
        parameters=parameters,
        config=config,
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


def check_instance_kind(config: Message, engine_args: dict[str, Any], path: Path) -> None:
    """The backend's rule: a model spread over several GPUs must be declared KIND_MODEL."""
    devices = int(engine_args.get("tensor_parallel_size", 1)) * int(
        engine_args.get("pipeline_parallel_size", 1)
    )
    kinds = {group.kind for group in config.instance_group}
    if devices > 1 and kinds != {model_config_pb2.ModelInstanceGroup.KIND_MODEL}:
        raise ModelConfigError(
            f"{path}: KIND_GPU is for single-GPU models; a model with tensor/pipeline "
            "parallel size > 1 needs `instance_group [{ kind: KIND_MODEL }]`"
        )


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


def read_loras(version_path: Path, root: Path) -> dict[str, Path]:
    """multi_lora.json: adapter name -> folder; relative folders may not leave the repository."""
    path = version_path / LORA_FILE
    if not path.is_file():
        raise ModelConfigError(f"{path} is missing: `enable_lora` is true in {ENGINE_ARGS_FILE}")
    entries = read_json_object(path)
    loras = {}
    for name, folder in entries.items():
        if not isinstance(folder, str):
            raise ModelConfigError(f"{path}: adapter '{name}' must map to a folder path")
        adapter = Path(folder)
        if not adapter.is_absolute():
            adapter = (version_path / adapter).resolve()
            if not adapter.is_relative_to(root):
                raise ModelConfigError(f"{path}: adapter '{name}' points outside the repository")
        loras[name] = adapter
    return loras
