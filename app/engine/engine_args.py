"""model.json as the installed vLLM reads it: renamed arguments upgraded, unknown ones named."""

from __future__ import annotations

import dataclasses
import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.platforms import current_platform

from app.engine.cpu_defaults import CpuHost, cpu_engine_defaults, log_choices
from app.errors import ModelConfigError, did_you_mean
from app.repository.layout import ENGINE_NOTES

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
