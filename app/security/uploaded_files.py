"""What the JSON files of a load request (`file:` overrides: config.json, tokenizer_config.json,
adapter_config.json, ...) may name. vLLM and transformers follow some keys of those files to
another model, tokenizer or file, resolved from the server's working directory or the hub: a
client's file may not carry them. Keys that only label where a file came from (`_name_or_path`
and the like, which transformers replaces with the folder it loads from) may keep a name, but
not an absolute path or one that climbs out with `..`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from app.errors import ModelConfigError

REFUSED_KEYS = {
    "speculators_config": "makes vLLM load its verifier model in place of this one",
}
"""Keys refused whatever they hold (but null), with the reason."""
FOLLOWED_KEYS = frozenset(
    {"tokenizer", "tokenizer_name", "model", "model_id", "repo_id", "draft_model", "verifier"}
)
"""Keys whose text vLLM or transformers may open as a model, tokenizer or file."""
FOLLOWED_SUFFIXES = ("_file", "_files", "_path", "_dir", "_model_id")
"""So are keys ending in these (`tokenizer_file`, `vocab_file`, `text_model_id`, ...)."""
FILE_NAME_LIST_KEYS = frozenset({"configuration_files", "fast_tokenizer_files"})
"""Lists of file names that transformers looks up inside the model's folder: plain names only."""
LABEL_SUFFIX = "name_or_path"
"""`_name_or_path`, `base_model_name_or_path`, ...: a label, unless a path out of the folder."""
SKIPPED_FILES = frozenset({"model.json", "multi_lora.json"})
"""This server's own files, held to their own rules (app/security/load_overrides.py)."""


def check_uploaded_files(model_dir: Path) -> None:
    """Every JSON file of a load request's model folder (written from its `file:` overrides)
    checked; a `ModelConfigError` naming the file and key of the first reference refused."""
    for path in sorted(model_dir.rglob("*.json")):
        if path.is_file() and path.name not in SKIPPED_FILES:
            check_json_file(path, path.relative_to(model_dir).as_posix())


def check_json_file(path: Path, name: str) -> None:
    """One file (`name`: its path in the model folder, for the message)."""
    try:
        document = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise ModelConfigError(f"load request file '{name}': not valid JSON ({exc})") from None
    for key_path, key, value in entries(document):
        problem = refusal(key, value)
        if problem is not None:
            raise ModelConfigError(f"load request file '{name}': '{key_path}' {problem}")


def entries(document: Any) -> Iterator[tuple[str, str, Any]]:
    """(dotted key path, key, value) of every object entry at any depth, without recursion
    (a deeply nested file cannot exhaust the stack)."""
    pending: list[tuple[str, Any]] = [("", document)]
    while pending:
        prefix, node = pending.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                key_path = f"{prefix}.{key}" if prefix else str(key)
                yield key_path, str(key), value
                pending.append((key_path, value))
        elif isinstance(node, list):
            pending.extend((f"{prefix}[{index}]", item) for index, item in enumerate(node))


def refusal(key: str, value: Any) -> str | None:
    """Why `value` under `key` may not be in a client's file, or None."""
    texts = [item for item in (value if isinstance(value, list) else [value]) if item]
    if key in REFUSED_KEYS and value is not None:
        return f"{REFUSED_KEYS[key]}: not allowed in a load request's files"
    strings = [text for text in texts if isinstance(text, str)]
    if key.endswith(LABEL_SUFFIX):
        outside = [text for text in strings if leaves_folder(text)]
        if outside:
            return (
                f"names {outside[0][:80]!r}, outside the model's own folder: absolute paths "
                "and '..' are not allowed in a load request's files"
            )
        return None
    if key in FILE_NAME_LIST_KEYS:
        named = [text for text in strings if not is_plain_file_name(text)]
        if named:
            return f"may only list file names of the model's folder, got {named[0][:80]!r}"
        return None
    if is_followed(key) and strings:
        return (
            f"names {strings[0][:80]!r}, which vLLM would look up as a model, tokenizer or "
            "file of its own (on the server's disk or the hub), not in this folder: not "
            "allowed in a load request's files (leave it out: the folder's own files are "
            "found without it)"
        )
    return None


def is_followed(key: str) -> bool:
    return key in FOLLOWED_KEYS or key.endswith(FOLLOWED_SUFFIXES)


def leaves_folder(text: str) -> bool:
    """An absolute path, a home folder, or a path climbing out with `..`."""
    path = PurePosixPath(text.replace("\\", "/"))
    return path.is_absolute() or text.startswith("~") or ".." in path.parts


def is_plain_file_name(text: str) -> bool:
    return "/" not in text and "\\" not in text and text not in {".", ".."} and text[:1] != "~"
