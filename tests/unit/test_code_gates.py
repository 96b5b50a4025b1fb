"""The code gates of pyproject.toml: ruff's lint rules and format over the whole project, and
mypy (strict) over app/. Each fails with the tool's findings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_mypy_finds_nothing_in_app() -> None:
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
