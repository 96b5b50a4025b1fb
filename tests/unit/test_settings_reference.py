"""One source of truth for settings: the reference page, Triton's flag tables, the TOML example
and the chart's values schema are generated from app/settings.py and stay so."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from app.cli import reference
from app.paths import PROJECT_ROOT
from app.settings import Settings

CHART = PROJECT_ROOT / "charts" / "triton-vllm-generate"


def test_generated_files_are_up_to_date() -> None:
    stale = [
        str(path.relative_to(PROJECT_ROOT))
        for path, content in reference.generated().items()
        if not path.exists() or path.read_text() != content
    ]
    assert not stale, f"run `python -m app.cli.reference`: {stale} differ from app/settings.py"


def test_every_setting_is_described() -> None:
    assert [name for name, info in Settings.model_fields.items() if not info.description] == []


def test_the_reference_page_lists_every_setting_once() -> None:
    page = reference.SETTINGS_PAGE.read_text()
    for name in Settings.model_fields:
        assert len(re.findall(rf"^\| `{name.upper()}` \|", page, re.MULTILINE)) == 1, name


def test_the_toml_example_uncommented_gives_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(PROJECT_ROOT)
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    lines = reference.TOML_EXAMPLE.read_text().splitlines()
    settings_lines = [
        line.removeprefix("# ") for line in lines if re.match(r"# [a-z_0-9]+ = ", line)
    ]
    values = tomllib.loads("\n".join(line for line in settings_lines if "(not set)" not in line))
    assert set(values) | {
        n for n, i in Settings.model_fields.items() if i.get_default() is None
    } == set(Settings.model_fields)
    values["model_repository"] = [str(PROJECT_ROOT / path) for path in values["model_repository"]]
    assert Settings(**values) == Settings()


def test_the_values_schema_takes_each_setting_by_its_variable() -> None:
    schema = json.loads(reference.VALUES_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    assert set(schema["properties"]["settings"]["properties"]) == {
        name.upper() for name in Settings.model_fields
    }
    assert not list(
        validator.iter_errors(
            {"settings": {"MAX_N": 4, "API_KEYS": ["k"], "LOG_FORMAT": "ISO8601"}}
        )
    )
    assert list(validator.iter_errors({"settings": {"MAX_N": 0}})), "a value out of range"
    assert list(validator.iter_errors({"settings": {"NO_SUCH_SETTING": 1}})), "a misspelt name"


@pytest.mark.parametrize(
    "values",
    [CHART / "values.yaml", *sorted((CHART / "examples").glob("*.yaml"))],
    ids=lambda p: p.name,
)
def test_the_charts_values_pass_its_schema(values: Path) -> None:
    schema = json.loads(reference.VALUES_SCHEMA.read_text())
    data = yaml.safe_load(values.read_text())
    assert not [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(data)]
