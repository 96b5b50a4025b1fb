"""Triton's load overrides: a model configuration (`config`, JSON) and model files
(`file:<version>/<name>`) given in a load request instead of the repository's."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from google.protobuf import json_format, text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2

from app.errors import InvalidRequestError
from app.repository.config_file import CONFIG_FILE
from app.repository.layout import Provenance
from app.security.uploaded_files import check_uploaded_files

CONFIG_PARAMETER = "config"
FILE_PREFIX = "file:"
OVERRIDE_FOLDER_PREFIX = "model-override-"


@dataclass(frozen=True)
class ModelOverride:
    """What a load request puts in place of the repository's files for this load."""

    config: Message
    files: dict[PurePosixPath, bytes] = field(default_factory=dict)
    """Relative path in the model folder -> content. When given, the model folder holds
    only these files (and the config), as in Triton."""

    @property
    def provenance(self) -> Provenance:
        """The client gave the config, and the files too when it gave any."""
        return Provenance(config=True, files=bool(self.files))


@dataclass(frozen=True)
class OverrideLimits:
    """How much the `file:` overrides of one load request may carry."""

    max_files: int = 64
    max_bytes: int = 64 * 1024 * 1024
    """Their contents' total size."""


JSON_VALUE_ALLOWANCE = 1024
"""JSON values a load body may hold besides its files: the config's own (it is JSON text)."""


def check_load_body_size(body: bytes, max_files: int) -> None:
    """Refuse a JSON load body with far more values than a load of `max_files` files has,
    before parsing it: every value but the first follows a ',' and every container opens
    with '[' or '{' (base64 file contents hold none of them), so counting those bytes
    bounds the parser's work in one pass over the bytes."""
    values = body.count(b",") + body.count(b"[") + body.count(b"{")
    if values > max_files + JSON_VALUE_ALLOWANCE:
        raise InvalidRequestError(
            f"load request body: {values} JSON values, more than a load with at most {max_files} "
            "'file:' overrides holds"
        )


def check_override_files(sizes: Mapping[str, int], limits: OverrideLimits) -> None:
    """Refuse a load request with more `file:` parameters, or more bytes in them, than
    `limits` allow (`sizes`: each parameter's content size), before any is decoded or written."""
    files = [size for key, size in sizes.items() if key.startswith(FILE_PREFIX)]
    if len(files) > limits.max_files:
        raise InvalidRequestError(
            f"load parameters: {len(files)} 'file:' overrides, above this server's limit of "
            f"{limits.max_files}"
        )
    total = sum(files)
    if total > limits.max_bytes:
        raise InvalidRequestError(
            f"load parameters: 'file:' overrides of {total} bytes in all, above this server's "
            f"limit of {limits.max_bytes} bytes"
        )


def parse_override(parameters: Mapping[str, object]) -> ModelOverride | None:
    """The override of a load request's `parameters` (file contents already decoded to
    bytes by the frontend), or None; anything else is a 400 naming the parameter."""
    config_text = parameters.get(CONFIG_PARAMETER)
    files = {}
    for key, value in parameters.items():
        if key == CONFIG_PARAMETER:
            if not isinstance(value, str):
                raise InvalidRequestError(
                    "invalid value type for load parameter 'config', expected a string of JSON."
                )
        elif key.startswith(FILE_PREFIX):
            if not isinstance(value, bytes):
                raise InvalidRequestError(
                    f"invalid value type for load parameter '{key}', expected file content."
                )
            files[override_path(key)] = value
        else:
            raise InvalidRequestError(f"unrecognized load parameter '{key}'.")
    if config_text is None:
        if files:
            raise InvalidRequestError(
                "load parameters 'file:...' need the 'config' parameter as well"
            )
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
        raise InvalidRequestError(
            f"load parameter '{key}': the path must stay inside the model folder"
        )
    return path


@dataclass(frozen=True)
class OverrideFolder:
    """A load request's model folder, written to a temporary folder (`root`): kept while the
    model it loaded is served, since a failed engine restarts from it; removed after."""

    root: Path
    path: Path
    """The model folder inside `root`, named as the model."""

    async def remove(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self.root, True)


async def write_override_folder(model_dir: Path, override: ModelOverride) -> OverrideFolder:
    """A temporary model folder holding the override's config and files (or links to the
    repository's version folders when only the config is overridden), written and checked
    off the event loop; removed again if that fails."""
    root = Path(tempfile.mkdtemp(prefix=OVERRIDE_FOLDER_PREFIX))
    folder = OverrideFolder(root, root / model_dir.name)
    try:
        await asyncio.to_thread(write_override, folder.path, model_dir, override)
    except BaseException:
        await folder.remove()
        raise
    return folder


def write_override(folder: Path, model_dir: Path, override: ModelOverride) -> None:
    folder.mkdir()
    config = model_config_pb2.ModelConfig()
    config.CopyFrom(override.config)
    config.name = config.name or model_dir.name
    (folder / CONFIG_FILE).write_text(text_format.MessageToString(config))
    if override.files:
        for path, content in override.files.items():
            write_uploaded_file(folder, path, content)
        check_uploaded_files(folder)
        return
    for version in model_dir.iterdir():
        if version.is_dir() and version.name.isdigit():
            (folder / version.name).symlink_to(version.resolve(), target_is_directory=True)


def write_uploaded_file(folder: Path, path: PurePosixPath, content: bytes) -> None:
    """One of a load request's files, or a 400 naming it when another of its files is in the
    way (`file:1/a` beside `file:1/a/b`, or a file named like a version folder)."""
    target = folder / path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
        raise InvalidRequestError(
            f"load request file '{path}': another file of the request has its place or is "
            "where its folder would be"
        ) from exc
