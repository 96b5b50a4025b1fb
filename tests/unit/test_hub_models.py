"""Hugging Face Hub ids in model.json, as Triton's vLLM backend takes them: the server leaves
downloads on unless the environment turns them off (HF_HUB_OFFLINE, which it honours); with
them off, an id missing from the cache stops the load in one line saying how to allow them.
Nothing here reaches the network: what the engine would get is asserted, not a download."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import app.cli.main as cli
from app.errors import ModelConfigError

HUB_ID = "facebook/opt-125m"


def environment_the_server_gets(monkeypatch: pytest.MonkeyPatch) -> str | None:
    """HF_HUB_OFFLINE as the server (and the engines it starts) would see it."""
    seen: dict[str, str | None] = {}
    monkeypatch.setattr(cli, "log_to", lambda *_: None)
    monkeypatch.setattr(cli, "serve", lambda *_: seen.update(v=os.environ.get("HF_HUB_OFFLINE")))
    cli.main([])
    return seen["v"]


def test_without_hf_hub_offline_the_server_leaves_downloads_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert environment_the_server_gets(monkeypatch) is None


@pytest.mark.parametrize("value", ["1", "0"])
def test_an_hf_hub_offline_the_user_sets_is_honoured(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert environment_the_server_gets(monkeypatch) == value


def check(model: str, tmp_path: Path) -> None:
    from app.engine.engine_args import check_hub_models

    args: dict[str, Any] = {"model": model, "download_dir": str(tmp_path / "empty-cache")}
    check_hub_models(args, tmp_path / "alpha" / "1" / "model.json")


def test_offline_a_hub_id_missing_from_the_cache_is_one_line_on_how_to_download(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelConfigError) as refused:
        check(HUB_ID, tmp_path)
    message = str(refused.value)
    assert "\n" not in message
    assert f"model '{HUB_ID}' is not in the local Hugging Face cache" in message
    assert "downloads are off (HF_HUB_OFFLINE=1): set HF_HUB_OFFLINE=0 to download it" in message


def test_online_a_hub_id_is_left_to_vllm_to_download(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import app.engine.engine_args as engine_args

    def no_lookup(*_: object, **__: object) -> None:
        raise AssertionError("the cache is not looked up while downloads are on")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(engine_args, "snapshot_download", no_lookup)
    check(HUB_ID, tmp_path)


def test_offline_a_local_folder_or_a_path_is_not_a_hub_id(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "weights").mkdir()
    check(str(tmp_path / "weights"), tmp_path)
    check(".cache/models/smollm2", tmp_path)
    check("./missing/folder", tmp_path)
