"""Model repository loading: Triton layout, engine-argument checks, paths, versions, LoRA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.engine_args import vllm_engine_args
from app.errors import ModelConfigError
from app.paths import PROJECT_ROOT
from app.repository.layout import load_repository
from tests.support.repository import write_model


def test_default_repository_serves_smollm2() -> None:
    (spec,) = load_repository(PROJECT_ROOT / "configs" / "model_repository")
    assert (spec.name, spec.version) == ("smollm2", "1")
    assert spec.engine_args["model"] == str(PROJECT_ROOT / ".cache" / "models" / "smollm2")
    assert spec.flag("APPLY_CHAT_TEMPLATE") and spec.flag("REPORT_CUSTOM_METRICS")


def test_unknown_engine_argument_is_a_clear_start_up_error(tmp_path: Path) -> None:
    write_model(tmp_path, "m", model="x", max_model_length=5)
    with pytest.raises(
        ModelConfigError,
        match=r"unknown vLLM engine arguments: 'max_model_length' "
        r"\(did you mean 'max_model_len'\?\)",
    ):
        load_repository(tmp_path, check_engine_args=vllm_engine_args)


def test_model_path_relative_to_model_json_folder(tmp_path: Path) -> None:
    version_dir = write_model(tmp_path, "m", model="weights")
    (version_dir / "weights").mkdir()
    (spec,) = load_repository(tmp_path)
    assert spec.engine_args["model"] == str(version_dir / "weights")


def test_model_id_that_is_not_a_path_is_passed_unchanged(tmp_path: Path) -> None:
    write_model(tmp_path, "m", model="facebook/opt-125m")
    assert load_repository(tmp_path)[0].engine_args["model"] == "facebook/opt-125m"


def test_missing_model_json_and_bad_json_are_named(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    with pytest.raises(ModelConfigError, match=r"model\.json is missing"):
        load_repository(tmp_path)
    (tmp_path / "m" / "1" / "model.json").write_text("{oops")
    with pytest.raises(ModelConfigError, match="invalid JSON"):
        load_repository(tmp_path)


def test_latest_version_by_default_and_policies(tmp_path: Path) -> None:
    for version in ("1", "2", "10"):
        write_model(tmp_path, "m", version)
    assert [s.version for s in load_repository(tmp_path)] == ["10"]
    (tmp_path / "m" / "config.pbtxt").write_text("version_policy: { all { } }")
    assert [s.version for s in load_repository(tmp_path)] == ["1", "2", "10"]
    (tmp_path / "m" / "config.pbtxt").write_text(
        "version_policy: { specific { versions: [1, 2] } }"
    )
    assert [s.version for s in load_repository(tmp_path)] == ["1", "2"]
    (tmp_path / "m" / "config.pbtxt").write_text("version_policy: { latest { num_versions: 2 } }")
    assert [s.version for s in load_repository(tmp_path)] == ["2", "10"]


def test_config_pbtxt_errors_and_name_mismatch(tmp_path: Path) -> None:
    write_model(tmp_path, "m", config='name: "other"')
    with pytest.raises(ModelConfigError, match="differs from its folder"):
        load_repository(tmp_path)
    (tmp_path / "m" / "config.pbtxt").write_text("not_a_field: 1")
    with pytest.raises(ModelConfigError, match=r"config\.pbtxt"):
        load_repository(tmp_path)


def test_only_the_requested_models_load(tmp_path: Path) -> None:
    write_model(tmp_path, "a")
    write_model(tmp_path, "b")
    assert [s.name for s in load_repository(tmp_path, ["b"])] == ["b"]
    with pytest.raises(ModelConfigError, match=r"\['c'\] not found"):
        load_repository(tmp_path, ["c"])


def test_lora_adapters_resolve_inside_the_repository(tmp_path: Path) -> None:
    version_dir = write_model(tmp_path, "m", model="x", enable_lora="true")
    (version_dir / "multi_lora.json").write_text(json.dumps({"doc": "adapters/doc"}))
    (spec,) = load_repository(tmp_path)
    assert spec.loras == {"doc": version_dir / "adapters" / "doc"}
    assert spec.engine_args["enable_lora"] is True
    (version_dir / "multi_lora.json").write_text(json.dumps({"evil": "../../../../etc"}))
    with pytest.raises(ModelConfigError, match="outside the repository"):
        load_repository(tmp_path)
    (version_dir / "multi_lora.json").unlink()
    with pytest.raises(ModelConfigError, match=r"multi_lora\.json is missing"):
        load_repository(tmp_path)
