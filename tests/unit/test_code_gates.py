"""The code gates of pyproject.toml, each over the whole project: ruff's lint rules and format,
and mypy (app/ strict, the tests, benchmarks and scripts by a profile of their own). Each fails
with the tool's findings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from app.paths import PROJECT_ROOT


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One of the `dev` extra's tools, run in the project's root with its pyproject settings."""
    path = Path(sys.executable).parent / tool
    assert path.exists(), f"{tool} is missing: install the dev extra (pip install -e '.[dev]')"
    return subprocess.run(
        [str(path), *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_finds_nothing() -> None:
    result = run("ruff", "check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted() -> None:
    """`ruff format` would change nothing (run it to settle a failure)."""
    result = run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def python_folders() -> set[str]:
    """The project's top-level folders with Python in them (not the hidden ones: .venv, .cache)."""
    return {
        folder.name
        for folder in PROJECT_ROOT.iterdir()
        if folder.is_dir()
        and not folder.name.startswith(".")
        and folder.name not in {"build", "dist"}
        and next(folder.rglob("*.py"), None) is not None
    }


def test_mypy_finds_nothing_in_the_whole_project() -> None:
    """`mypy` checks pyproject's `files`, which name every Python folder of the project."""
    files = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert python_folders() <= set(files), "a Python folder is missing from [tool.mypy] files"
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
