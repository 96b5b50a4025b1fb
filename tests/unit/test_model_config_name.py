"""Triton's --model-config-name (engine double): a model is configured from
`configs/<name>.pbtxt` where its folder has one, else from config.pbtxt; without the setting
`configs/` is ignored; explicit loads and poll mode read the chosen file anew."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.errors import ModelConfigError
from app.main import create_app
from app.repository.layout import load_repository
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.clients import started_clients
from tests.support.repository import EXPLICIT_CONTROL, write_model
from tests.support.waiting import wait_until


def source_config(source: str, name: str | None = None) -> str:
    """A config.pbtxt whose parameter SOURCE tells which file it is."""
    named = f'name: "{name}"\n' if name else ""
    return f'{named}parameters: {{ key: "SOURCE" value: {{ string_value: "{source}" }} }}'


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """`custom` has configs/alt.pbtxt (and configs/other.pbtxt), `plain` only config.pbtxt."""
    root = tmp_path / "repo"
    write_model(root, "custom", config=source_config("default"))
    (root / "custom" / "configs").mkdir()
    (root / "custom" / "configs" / "alt.pbtxt").write_text(source_config("alt"))
    (root / "custom" / "configs" / "other.pbtxt").write_text(source_config("other"))
    write_model(root, "plain", config=source_config("default"))
    (root / "plain" / "configs").mkdir()
    (root / "plain" / "configs" / "other.pbtxt").write_text(source_config("other"))
    return root


def source(client: TestClient, model: str) -> str:
    """The SOURCE parameter /v2/models/<model>/config reports."""
    response = client.get(f"/v2/models/{model}/config")
    assert response.status_code == 200, response.text
    value: str = response.json()["parameters"]["SOURCE"]["string_value"]
    return value


def started(start: Any, root: Path, **settings: Any) -> TestClient:
    app = create_app(
        Settings(model_repository=[root], engine_probe_interval_seconds=0, **settings),
        engine_factory=lambda spec: FakeEngine(),
    )
    client: TestClient = start(app)
    return client


def test_the_named_file_configures_a_model_that_has_it(root: Path) -> None:
    specs = {spec.name: spec for spec in load_repository(root, config_name="alt")}
    assert specs["custom"].parameters == {"SOURCE": "alt"}
    assert specs["custom"].config_path == root / "custom" / "configs" / "alt.pbtxt"
    assert specs["plain"].parameters == {"SOURCE": "default"}
    assert specs["plain"].config_path == root / "plain" / "config.pbtxt"


def test_without_the_setting_configs_is_ignored(root: Path) -> None:
    for spec in load_repository(root):
        assert spec.parameters == {"SOURCE": "default"}
        assert spec.config_path == spec.version_path.parent / "config.pbtxt"


def test_errors_name_the_chosen_file(root: Path) -> None:
    (root / "custom" / "configs" / "alt.pbtxt").write_text('name: "elsewhere"')
    with pytest.raises(ModelConfigError, match=r"configs/alt\.pbtxt: name 'elsewhere' differs"):
        load_repository(root, only=["custom"], config_name="alt")
    (root / "custom" / "configs" / "alt.pbtxt").write_text("parameters {")
    with pytest.raises(ModelConfigError, match=r"configs/alt\.pbtxt: "):
        load_repository(root, only=["custom"], config_name="alt")


def test_the_config_endpoint_shows_the_chosen_file(root: Path) -> None:
    with started_clients() as start:
        client = started(start, root, model_config_name="alt")
        assert (source(client, "custom"), source(client, "plain")) == ("alt", "default")
        client = started(start, root)
        assert (source(client, "custom"), source(client, "plain")) == ("default", "default")


def test_the_environment_variable_sets_it_and_a_bad_name_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODEL_CONFIG_NAME", "alt")
    assert Settings().model_config_name == "alt"
    for name in ("h 100", "../alt", "a/b"):
        with pytest.raises(ValidationError, match="model_config_name"):
            Settings(model_config_name=name)


def test_an_explicit_load_reads_the_chosen_file_anew(root: Path) -> None:
    with started_clients() as start:
        client = started(start, root, model_config_name="alt", **EXPLICIT_CONTROL)
        (root / "custom" / "configs" / "alt.pbtxt").write_text(source_config("edited"))
        (root / "plain" / "configs" / "alt.pbtxt").write_text(source_config("added"))
        for model in ("custom", "plain"):
            assert client.post(f"/v2/repository/models/{model}/load").status_code == 200
        assert (source(client, "custom"), source(client, "plain")) == ("edited", "added")
        (root / "custom" / "configs" / "alt.pbtxt").unlink()
        assert client.post("/v2/repository/models/custom/load").status_code == 200
        assert source(client, "custom") == "default"


def test_a_config_override_takes_the_chosen_files_place(root: Path) -> None:
    with started_clients() as start:
        client = started(start, root, model_config_name="alt", **EXPLICIT_CONTROL)
        config = {"parameters": {"SOURCE": {"string_value": "override"}}}
        body = {"parameters": {"config": json.dumps(config)}}
        assert client.post("/v2/repository/models/custom/load", json=body).status_code == 200
        assert source(client, "custom") == "override"
        assert client.post("/v2/repository/models/custom/load").status_code == 200
        assert source(client, "custom") == "alt"


def test_poll_mode_reloads_a_model_whose_chosen_file_changed(root: Path) -> None:
    with started_clients() as start:
        client = started(
            start,
            root,
            model_config_name="alt",
            model_control_mode="poll",
            repository_poll_secs=0.1,
        )
        assert source(client, "custom") == "alt"
        (root / "custom" / "configs" / "alt.pbtxt").write_text(source_config("edited"))
        wait_until(lambda: source(client, "custom") == "edited", timeout=10)
        assert source(client, "plain") == "default"
