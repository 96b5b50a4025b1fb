"""model.json as the installed vLLM reads it: renamed arguments upgraded, unknown ones named."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from functools import cache
from pathlib import Path
from typing import Any

from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.platforms import current_platform

from app.engine.cpu_defaults import CpuHost, cpu_engine_defaults, log_choices
from app.errors import ModelConfigError, did_you_mean
from app.paths import PROJECT_ROOT
from app.repository.layout import ENGINE_NOTES, PATH_ENGINE_ARGS

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
"""Either, true, keeps the Hugging Face Hub's downloads off (as huggingface_hub reads them)."""
RENAMED_ENGINE_ARGS = {"disable_log_requests": "enable_log_requests"}
"""Boolean engine arguments vLLM renamed to their negation; old model.json files still load."""


@cache
def engine_arg_names() -> frozenset[str]:
    """Names `AsyncEngineArgs` accepts."""
    return frozenset(f.name for f in dataclasses.fields(AsyncEngineArgs))


def vllm_engine_args(engine_args: dict[str, Any], path: Path) -> dict[str, Any]:
    """The arguments of one model.json for `AsyncEngineArgs`, or a `ModelConfigError`
    naming each unknown one (with the closest known name). On a CPU engine, the dtype and
    prefill chunk are chosen for this CPU where model.json leaves them unset (app/engine/
    cpu_defaults.py): logged, and returned under `ENGINE_NOTES` for the model's config."""
    upgraded = upgrade_engine_args(engine_args)
    known = engine_arg_names()
    problems = [f"'{key}'{did_you_mean(key, known)}" for key in sorted(set(upgraded) - known)]
    if problems:
        raise ModelConfigError(f"{path}: unknown vLLM engine arguments: {', '.join(problems)}")
    check_hub_models(upgraded, path)
    if (
        upgraded.get("distributed_executor_backend") == "ray"
        and importlib.util.find_spec("ray") is None
    ):
        raise ModelConfigError(
            f"{path}: distributed_executor_backend 'ray' needs Ray, which is not installed "
            "(the GPU image carries it; elsewhere: pip install -e '.[ray]')"
        )
    if current_platform.is_cpu():
        upgraded, notes = cpu_engine_defaults(upgraded, CpuHost.this())
        log_choices(path, notes)
        upgraded[ENGINE_NOTES] = notes
    return upgraded


def upgrade_engine_args(engine_args: dict[str, Any]) -> dict[str, Any]:
    """Map renamed arguments onto the installed vLLM's names, leaving current ones as they are."""
    known = engine_arg_names()
    upgraded = dict(engine_args)
    for old, new in RENAMED_ENGINE_ARGS.items():
        if old in upgraded and old not in known and new in known:
            upgraded[new] = str(upgraded.pop(old)).lower() != "true"
    return upgraded


def offline_variable() -> str | None:
    """The variable that keeps Hub downloads off (`HF_HUB_OFFLINE=1`), if one does."""
    for name in OFFLINE_VARIABLES:
        if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return f"{name}={os.environ[name]}"
    return None


def check_hub_models(engine_args: dict[str, Any], path: Path) -> None:
    """With downloads off, a Hub id (`facebook/opt-125m`) must be in the local Hub cache: else
    one line saying how to allow downloads (before any engine starts)."""
    offline = offline_variable()
    if offline is None or os.environ.get("VLLM_USE_MODELSCOPE", "").lower() in ("1", "true"):
        return
    for key in PATH_ENGINE_ARGS:
        model = engine_args.get(key)
        if not isinstance(model, str) or is_local(model, path.parent):
            continue
        try:
            snapshot_download(
                model,
                revision=engine_args.get("revision" if key == "model" else "tokenizer_revision"),
                cache_dir=engine_args.get("download_dir"),
                local_files_only=True,
            )
        except HFValidationError:
            continue  # not a Hub id: vLLM names the missing folder
        except LocalEntryNotFoundError:
            raise ModelConfigError(
                f"{path}: {key} '{model}' is not in the local Hugging Face cache and downloads "
                f"are off ({offline}): set HF_HUB_OFFLINE=0 to download it, or give a local "
                "folder"
            ) from None


def is_local(model: str, version_path: Path) -> bool:
    """Whether `model` names a folder or file (absolute, next to model.json, or in the project)."""
    candidate = Path(model).expanduser()
    if candidate.is_absolute():
        return candidate.exists()
    return any((base / candidate).exists() for base in (version_path, PROJECT_ROOT))
