"""Which file configures a model: its config.pbtxt, or with Triton's --model-config-name=<name>
`configs/<name>.pbtxt` where the model's folder has one (Triton's "Custom Model
Configuration"; else config.pbtxt, as in Triton)."""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE = "config.pbtxt"
CUSTOM_CONFIG_FOLDER = "configs"
CUSTOM_CONFIG_SUFFIX = ".pbtxt"


def custom_config_path(model_dir: Path, config_name: str) -> Path:
    """Where `config_name`'s configuration of the model in `model_dir` would be."""
    return model_dir / CUSTOM_CONFIG_FOLDER / f"{config_name}{CUSTOM_CONFIG_SUFFIX}"


def config_path(model_dir: Path, config_name: str | None = None) -> Path:
    """The file configuring the model in `model_dir`: `configs/<config_name>.pbtxt` when a
    name is given and that file exists, else config.pbtxt (which may be absent)."""
    if config_name:
        custom = custom_config_path(model_dir, config_name)
        if custom.is_file():
            return custom
    return model_dir / CONFIG_FILE
