"""scripts/prepare_default_model.py leaves a model folder that any user can read: the images
run the server as uid 1000 over a folder prepared by root (a volume, or the with-model
image's build)."""

from __future__ import annotations

import importlib.util
import stat
import sys
from pathlib import Path
from types import ModuleType

from app.paths import PROJECT_ROOT


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "prepare_default_model", PROJECT_ROOT / "scripts" / "prepare_default_model.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def modes(folder: Path) -> dict[str, int]:
    return {
        str(path.relative_to(folder)): stat.S_IMODE(path.stat().st_mode)
        for path in [folder, *folder.rglob("*")]
    }


def write_private_files(staging: Path) -> None:
    """As the converter's writers may: owner-only files and folders."""
    (staging / "model.safetensors").write_bytes(b"weights")
    (staging / "model.safetensors").chmod(0o600)
    (staging / "nested").mkdir(mode=0o700)
    (staging / "nested" / "tokenizer.json").write_text("{}")
    (staging / "nested" / "tokenizer.json").chmod(0o600)


def test_a_published_model_is_readable_by_every_user(tmp_path: Path) -> None:
    script = load_script()
    target = tmp_path / "models" / "smollm2"
    target.parent.mkdir()
    script.publish(target, write_private_files)
    assert modes(target) == {
        ".": 0o755,
        ".prepared": 0o644,
        "model.safetensors": 0o644,
        "nested": 0o755,
        "nested/tokenizer.json": 0o644,
    }
    assert (target / "model.safetensors").read_bytes() == b"weights"
    assert not [p for p in target.parent.iterdir() if p != target], "no staging folder is left"


def test_an_already_prepared_folder_from_an_older_run_is_made_readable(tmp_path: Path) -> None:
    script = load_script()
    target = tmp_path / "smollm2"
    target.mkdir(mode=0o700)
    write_private_files(target)
    (target / script.MARKER).write_text(script.GGUF_NAME + "\n")
    assert script.main([str(target)]) == 0
    assert set(modes(target).values()) == {0o755, 0o644}
