"""Load requests with file overrides in explicit mode, against the real engine: uploaded
files that name a folder outside the model's own (a speculators config's verifier, a
tokenizer file, a label with an absolute path) are refused before any engine starts, and a
canary folder beside the repository is never read; a model loaded from uploaded files is
restarted by supervision from its kept folder, which is removed at shutdown.

The server of this module: a copy of the default repository, every model loaded at start,
its temporary folders in a folder of its own (TMPDIR) so that the override folders can be
seen, admitting 8 requests a model (its loaded model runs one at a time)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from app.paths import PROJECT_ROOT
from tests.support import processes
from tests.support.servers import (
    EXPLICIT_CONTROL_ENV,
    RunningServer,
    start_server,
    stopping_cleanly,
)
from tests.support.waiting import wait_for

LOAD = "/v2/repository/models/smollm2/load"
GENERATE = "/v2/models/smollm2/generate"
READY = "/v2/models/smollm2/ready"
SMOLLM2 = PROJECT_ROOT / ".cache" / "models" / "smollm2"
OVERRIDE_FOLDERS = "model-override-*"
ENGINE_START_S = 600
"""An engine start on a slow host (a minute or two here)."""


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """repository/ (a copy of the default one), canary/ beside it, tmp/ (the server's TMPDIR)."""
    root = tmp_path_factory.mktemp("override")
    shutil.copytree(PROJECT_ROOT / "configs" / "model_repository", root / "repository")
    (root / "canary").mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SMOLLM2 / name, root / "canary" / name)
    (root / "tmp").mkdir()
    return root


@pytest.fixture(scope="module")
def explicit(place: Path) -> Iterator[RunningServer]:
    env = {
        **EXPLICIT_CONTROL_ENV,
        "ENGINE_RESTART_BACKOFF_SECONDS": "0.2",
        "DRAIN_TIMEOUT_SECONDS": "5",
        "MAX_PENDING_REQUESTS": "8",
        "TMPDIR": str(place / "tmp"),
    }
    repository = str(place / "repository")
    server = start_server("--model-repository", repository, name="override", env=env)
    with stopping_cleanly(server):
        yield server
    assert not list((place / "tmp").glob(OVERRIDE_FOLDERS)), "override folder left behind"


@pytest.fixture
def http(explicit: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=explicit.base_url, timeout=ENGINE_START_S) as client:
        yield client


@pytest.fixture(scope="module")
def uploaded_model(explicit: RunningServer) -> None:
    """smollm2 version 1 loaded from uploaded files (`small_model_files`, `load_body`)."""
    with httpx.Client(base_url=explicit.base_url, timeout=ENGINE_START_S) as client:
        response = client.post(LOAD, json=load_body(small_model_files()))
    assert response.status_code == 200, response.text


def load_body(files: dict[str, Any]) -> dict[str, object]:
    """model.json naming `weights` in version 1 (one request at a time, queued by priority),
    and `files` (name -> bytes or JSON) in it."""
    model_json = {
        "model": "weights",
        "load_format": "dummy",
        "max_model_len": 512,
        "max_num_seqs": 1,
        "scheduling_policy": "priority",
    }
    parameters = {"config": "{}", "file:1/model.json": encoded(model_json)}
    parameters.update({f"file:1/weights/{name}": encoded(data) for name, data in files.items()})
    return {"parameters": parameters}


def encoded(content: Any) -> str:
    raw = content if isinstance(content, bytes) else json.dumps(content).encode()
    return base64.b64encode(raw).decode()


def small_model_files() -> dict[str, Any]:
    """SmolLM2's config cut to 2 layers (weights: vLLM's dummy ones) and its tokenizer."""
    config = {**json.loads((SMOLLM2 / "config.json").read_text()), "num_hidden_layers": 2}
    tokenizer = {n: (SMOLLM2 / n).read_bytes() for n in ("tokenizer.json", "tokenizer_config.json")}
    return {"config.json": config, **tokenizer}


def attacks(canary: Path) -> list[tuple[str, dict[str, Any], str]]:
    """(file, its content, the key refused) of uploads that name the canary folder."""
    speculators = {
        "speculators_model_type": "eagle3",
        "architectures": ["Eagle3Speculator"],
        "transformer_layer_config": json.loads((SMOLLM2 / "config.json").read_text()),
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "eagle3", "speculative_tokens": 2}],
            "default_proposal_method": "eagle3",
            "verifier": {"name_or_path": str(canary), "architectures": ["LlamaForCausalLM"]},
        },
    }
    tokenizer_config = json.loads((SMOLLM2 / "tokenizer_config.json").read_text())
    tokenizer_file = {**tokenizer_config, "tokenizer_file": str(canary / "tokenizer.json")}
    labelled = {**small_model_files()["config.json"], "_name_or_path": str(canary)}
    return [
        ("config.json", speculators, "speculators_config"),
        ("tokenizer_config.json", tokenizer_file, "tokenizer_file"),
        ("config.json", labelled, "_name_or_path"),
    ]


def unread(folder: Path) -> dict[str, float]:
    """Every file of `folder` with its access time set to 0: a read sets it anew."""
    for path in folder.iterdir():
        os.utime(path, (0, path.stat().st_mtime))
    return {path.name: path.stat().st_atime for path in folder.iterdir()}


def test_uploads_naming_a_folder_outside_the_model_are_refused_and_it_is_never_read(
    http: httpx.Client, explicit: RunningServer, place: Path
) -> None:
    canary = place / "canary"
    log_before = log_of(explicit)
    for name, content, key in attacks(canary):
        before = unread(canary)
        files = {**small_model_files(), name: content}
        response = http.post(LOAD, json=load_body(files))
        assert response.status_code == 400, response.text
        assert f"load request file '1/weights/{name}': '{key}' " in response.json()["error"]
        assert unread_since(canary, before), f"the canary was read after the {key} upload"
    started = log_of(explicit)[len(log_before) :]
    assert "starting engine" not in started, started[-2000:]
    assert not list((place / "tmp").glob(OVERRIDE_FOLDERS))
    assert http.get(READY).status_code == 200


def unread_since(folder: Path, before: dict[str, float]) -> bool:
    """No file of `folder` was read since `unread` (where the file system keeps access times:
    a read of a control file shows whether it does)."""
    control = folder.parent / "control"
    control.write_text("{}")
    os.utime(control, (0, time.time()))
    control.read_text()
    keeps_access_times = control.stat().st_atime > 0
    now = {path.name: path.stat().st_atime for path in folder.iterdir()}
    return now == before or not keeps_access_times


def log_of(server: RunningServer) -> str:
    return server.log_path.read_text(errors="replace")


def engine_cores(server: RunningServer) -> list[psutil.Process]:
    return processes.engine_cores(server.process.pid)


@pytest.mark.usefixtures("uploaded_model")
def test_a_model_loaded_from_uploaded_files_is_restarted_after_its_engine_dies(
    http: httpx.Client, explicit: RunningServer, place: Path
) -> None:
    assert wait_for(lambda: len(engine_cores(explicit)) == 1, 60), engine_cores(explicit)
    body = {"text_input": "Hello", "parameters": {"max_tokens": 4, "ignore_eos": True}}
    assert http.post(GENERATE, json=body).status_code == 200
    (folder,) = (place / "tmp").glob(OVERRIDE_FOLDERS)
    (core,) = engine_cores(explicit)
    core.kill()
    restarted = wait_for(lambda: "engine restarted, ready" in log_of(explicit), ENGINE_START_S, 1)
    assert restarted and "creating a new engine failed" not in log_of(explicit)
    assert http.get(READY).status_code == 200
    answer = http.post(GENERATE, json=body)
    assert answer.status_code == 200, answer.text
    assert folder.is_dir() and [p.pid for p in engine_cores(explicit)] != [core.pid]


@pytest.mark.usefixtures("uploaded_model")
def test_a_priority_reorders_the_queue_of_an_engine_that_schedules_by_it(
    http: httpx.Client,
) -> None:
    """The loaded model runs one request at a time, queued by priority: while one runs, a
    request of priority 1 sent after one of priority 9 finishes first (first come, first
    served would run it last)."""
    assert http.get(READY).status_code == 200
    finished: dict[int, float] = {}

    def generate(priority: int, tokens: int) -> None:
        parameters = {"max_tokens": tokens, "ignore_eos": True, "priority": priority}
        response = http.post(GENERATE, json={"text_input": "Hello", "parameters": parameters})
        assert response.status_code == 200, response.text
        finished[priority] = time.monotonic()

    threads = [
        threading.Thread(target=generate, args=(priority, tokens))
        for priority, tokens in [(5, 480), (9, 8), (1, 8)]
    ]
    sent: list[float] = []
    for thread in threads:
        thread.start()
        sent.append(time.monotonic())
        time.sleep(0.3)
    for thread in threads:
        thread.join(ENGINE_START_S)
    assert finished[5] > sent[2], "the first request ended before the others queued"
    assert finished[1] < finished[9], finished
