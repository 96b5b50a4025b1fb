"""What a load request's override may carry. A client's model.json may only size and tune
the engine and name files inside its own model folder; the repository's files, written by
the operator, keep every engine argument."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from app.errors import ModelConfigError

CLIENT_ENGINE_ARGS: Mapping[str, frozenset[str] | None] = {
    **dict.fromkeys(
        (
            "served_model_name",
            "dtype",
            "seed",
            "max_model_len",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_num_scheduled_tokens",
            "gpu_memory_utilization",
            "kv_cache_memory_bytes",
            "kv_cache_dtype",
            "block_size",
            "num_gpu_blocks_override",
            "cpu_offload_gb",
            "enable_prefix_caching",
            "enable_chunked_prefill",
            "long_prefill_token_threshold",
            "async_scheduling",
            "enforce_eager",
            "disable_log_stats",
            "enable_log_requests",
            "disable_log_requests",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "disable_custom_all_reduce",
            "quantization",
            "enable_lora",
            "max_loras",
            "max_lora_rank",
            "max_cpu_loras",
            "lora_dtype",
            "fully_sharded_loras",
            "max_logprobs",
            "logprobs_mode",
            "disable_sliding_window",
            "skip_tokenizer_init",
            "override_generation_config",
            "limit_mm_per_prompt",
            "reasoning_parser",
        ),
        None,
    ),
    "model": None,
    "tokenizer": None,
    "tokenizer_mode": frozenset({"auto", "slow", "hf", "mistral"}),
    "load_format": frozenset({"auto", "safetensors", "gguf", "dummy"}),
    "config_format": frozenset({"auto", "hf", "mistral"}),
    "generation_config": frozenset({"auto", "vllm"}),
    "scheduling_policy": frozenset({"fcfs", "priority"}),
    "trust_remote_code": frozenset({"false", "False"}),
}
"""Engine arguments a load request's own model.json may set, with the values it may give
(None: any value). Everything else — arguments that import code or load plugins
(`trust_remote_code`, `worker_cls`, `logits_processors`, ...), read files outside the model
folder, reach the network or carry credentials — stays with the repository's files."""

PATH_ENGINE_ARGS = ("model", "tokenizer")
CHAT_TEMPLATE_PARAMETER = "OPENAI_CHAT_TEMPLATE"
CLIENT_REFUSED_PARAMETERS = {"OPENAI_TRUST_REQUEST_CHAT_TEMPLATE": "lets clients send templates"}
TEMPLATE_MARKERS = ("{{", "{%")


def check_client_engine_args(engine_args: Mapping[str, Any], version_dir: Path) -> dict[str, Any]:
    """A client's model.json (in `version_dir`) checked against the allow-list, with `model`
    and `tokenizer` resolved from `version_dir` to paths inside the model's folder; a
    `ModelConfigError` naming the first argument refused."""
    for key, value in engine_args.items():
        if key not in CLIENT_ENGINE_ARGS:
            raise ModelConfigError(
                f"engine argument '{key}' is not allowed in a load request's model.json "
                "(only in the repository's own files)"
            )
        allowed = CLIENT_ENGINE_ARGS[key]
        if allowed is not None and str(value) not in allowed:
            raise ModelConfigError(
                f"engine argument '{key}': {str(value)[:80]!r} is not allowed in a load request's "
                f"model.json (allowed: {', '.join(sorted(allowed))})"
            )
    checked = dict(engine_args)
    for key in PATH_ENGINE_ARGS:
        if key in checked:
            checked[key] = str(
                inside_model_folder(checked[key], version_dir, key, version_dir.parent)
            )
    return checked


def inside_model_folder(
    value: object, base: Path, what: str, model_dir: Path | None = None
) -> Path:
    """`value` as a path relative to `base` that exists and stays inside `model_dir` (default
    `base`; links resolved), or a `ModelConfigError` naming `what`."""
    relative = PurePosixPath(str(value))
    refusal = f"'{what}' must name a file or folder inside the model's own folder"
    if not isinstance(value, str) or not value or relative.is_absolute() or ".." in relative.parts:
        raise ModelConfigError(f"{refusal}, got {str(value)[:80]!r}")
    root = (model_dir or base).resolve()
    candidate = (base.resolve() / relative).resolve()
    if not candidate.is_relative_to(root) or not candidate.exists():
        raise ModelConfigError(f"{refusal}, got {value[:80]!r}")
    return candidate


def check_client_parameters(parameters: Mapping[str, str], model_dir: Path) -> None:
    """A client's config.pbtxt `parameters`: no option that opens the server further, and a
    chat template inline or from a file inside the model folder."""
    for key, reason in CLIENT_REFUSED_PARAMETERS.items():
        if parameters.get(key, "").strip().lower() == "true":
            raise ModelConfigError(
                f"parameter '{key}' {reason}: not allowed in a load request's config"
            )
    template = parameters.get(CHAT_TEMPLATE_PARAMETER)
    if template and not any(marker in template for marker in TEMPLATE_MARKERS):
        inside_model_folder(template, model_dir, CHAT_TEMPLATE_PARAMETER)


def check_client_adapter(folder: object, version_dir: Path, name: str) -> Path:
    """A LoRA adapter folder named by a client's multi_lora.json: inside the model folder."""
    return inside_model_folder(folder, version_dir, f"adapter '{name}'", version_dir.parent)
