"""The model repository the chart mounts, read by the server's own loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.paths import PROJECT_ROOT
from app.repository.layout import load_repository, read_config
from tests.deploy.conftest import CASES, model_repository_files, render


def write_repository(case: str, root: Path) -> Path:
    for path, text in model_repository_files(render(case)).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.mark.parametrize("case", CASES)
def test_server_loads_the_charts_model_repository(case: str, tmp_path: Path) -> None:
    """Triton text format, version folders and vLLM engine argument names all check out."""
    specs = load_repository(write_repository(case, tmp_path))
    assert specs
    for spec in specs:
        assert Path(spec.engine_args["model"]).is_absolute()


def test_default_model_matches_the_projects_repository(tmp_path: Path) -> None:
    """The chart's smollm2 is configs/model_repository/smollm2, with the image's model path."""
    chart_repo = write_repository("default", tmp_path)
    project_repo = PROJECT_ROOT / "configs" / "model_repository"
    assert read_config(chart_repo / "smollm2") == read_config(project_repo / "smollm2")
    chart_args = json.loads((chart_repo / "smollm2" / "1" / "model.json").read_text())
    project_args = json.loads((project_repo / "smollm2" / "1" / "model.json").read_text())
    assert chart_args.pop("model") == "/app/" + project_args.pop("model")
    assert chart_args == project_args
