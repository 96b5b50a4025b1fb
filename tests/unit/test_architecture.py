"""The layering of app/ (docs/architecture.md) and the size rules of the style guide."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from app.paths import PROJECT_ROOT

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
SOURCE_FOLDERS = ("app", "bench", "tests", "scripts")


def test_import_linter_contracts_hold() -> None:
    """Frontends never import each other, the core imports no frontend, web framework or
    settings, and only app/engine imports vLLM (the contracts in pyproject.toml)."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports)], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    "module",
    [
        "app.routes",
        "app.routes.generate",
        "app.main",
        "app.triton.inputs",
        "app.core.service",
        "app.grpc.server",
    ],
)
def test_the_http_frontend_loads_without_vllm(module: str) -> None:
    code = f"import sys, {module}; assert not {{'vllm', 'torch', 'ray'}} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, check=True)


def python_files() -> list[Path]:
    return sorted(
        path for folder in SOURCE_FOLDERS for path in (PROJECT_ROOT / folder).rglob("*.py")
    )


def test_no_file_over_400_lines_and_no_function_over_60() -> None:
    too_long = []
    for path in python_files():
        source = path.read_text()
        if len(source.splitlines()) > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(PROJECT_ROOT)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(
                        f"{path.relative_to(PROJECT_ROOT)}:{node.lineno} "
                        f"{node.name}: {length} lines"
                    )
    assert not too_long, "\n".join(too_long)
