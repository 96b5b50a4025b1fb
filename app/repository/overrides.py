"""Triton's load overrides: a model configuration (`config`, JSON) and model files
(`file:<version>/<name>`) given in a load request instead of the repository's."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from google.protobuf import json_format, text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from app.errors import InvalidRequestError
from app.repository.layout import CONFIG_FILE

CONFIG_PARAMETER = "config"
FILE_PREFIX = "file:"


@dataclass(frozen=True)
class ModelOverride:
    """What a load request puts in place of the repository's files for this load."""

    config: Message
    files: dict[PurePosixPath, bytes] = field(default_factory=dict)
    """Relative path in the model folder -> content. When given, the model folder holds
    only these files (and the config), as in Triton."""


def parse_override(parameters: Mapping[str, object]) -> ModelOverride | None:
    """The override of a load request's `parameters` (file contents already decoded to
    bytes by the frontend), or None; anything else is a 400 naming the parameter."""
    config_text = parameters.get(CONFIG_PARAMETER)
    files = {}
    for key, value in parameters.items():
        if key == CONFIG_PARAMETER:
            if not isinstance(value, str):
                raise InvalidRequestError("invalid value type for load parameter 'config', expected a string of JSON.")
        elif key.startswith(FILE_PREFIX):
            if not isinstance(value, bytes):
                raise InvalidRequestError(f"invalid value type for load parameter '{key}', expected file content.")
            files[override_path(key)] = value
        else:
            raise InvalidRequestError(f"unrecognized load parameter '{key}'.")
    if config_text is None:
        if files:
            raise InvalidRequestError("load parameters 'file:...' need the 'config' parameter as well")
        return None
    return ModelOverride(config=parse_config(str(config_text)), files=files)


def parse_config(text: str) -> Message:
    config = model_config_pb2.ModelConfig()
    try:
        json_format.Parse(text, config)
    except (json_format.ParseError, ValueError) as exc:
        raise InvalidRequestError(f"Invalid config override: {exc}") from exc
    return config


def override_path(key: str) -> PurePosixPath:
    """`file:1/model.json` -> `1/model.json`; a path leaving the model folder is a 400."""
    path = PurePosixPath(key.removeprefix(FILE_PREFIX))
    if not path.parts or path.is_absolute() or ".." in path.parts:
        raise InvalidRequestError(f"load parameter '{key}': the path must stay inside the model folder")
    return path


@contextmanager
def materialise(model_dir: Path, override: ModelOverride | None) -> Iterator[Path]:
    """The model folder to load from: the repository's, or a temporary one holding the
    override's config and files (or links to the repository's version folders when only
    the config is overridden). Removed when the load is done."""
    if override is None:
        yield model_dir
        return
    root = Path(tempfile.mkdtemp(prefix="model-override-"))
    try:
        folder = root / model_dir.name
        folder.mkdir()
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(override.config)
        config.name = config.name or model_dir.name
        (folder / CONFIG_FILE).write_text(text_format.MessageToString(config))
        if override.files:
            for path, content in override.files.items():
                target = folder / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        else:
            for version in model_dir.iterdir():
                if version.is_dir() and version.name.isdigit():
                    (folder / version.name).symlink_to(version.resolve(), target_is_directory=True)
        yield folder
    finally:
        shutil.rmtree(root, ignore_errors=True)
