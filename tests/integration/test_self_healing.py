"""Self-healing against the real engine: reloads that drop nothing and give memory back. (An
engine core killed in the middle of streams, which come back each time until the restart
budget is spent: test_migration_real_engine.py.)"""

from __future__ import annotations

import json
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
from tests.support.servers import (
    EXPLICIT_CONTROL_ENV,
    RunningServer,
    start_server,
    stopping_cleanly,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("several_engines")

GENERATE = "/v2/models/smollm2/generate"
STREAM = "/v2/models/smollm2/generate_stream"
LOAD = "/v2/repository/models/smollm2/load"
GREEDY = {
    "text_input": "What is Triton Inference Server?",
    "parameters": {"temperature": 0, "max_tokens": 24},
}
CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
MAX_RESTARTS = 5


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the default repository, so that a test can break its model.json."""
    root = tmp_path_factory.mktemp("healing") / "repository"
    shutil.copytree(PROJECT_ROOT / "configs" / "model_repository", root)
    return root


@pytest.fixture(scope="module")
def healing(repository: Path) -> Iterator[RunningServer]:
    env = {
        "ENGINE_RESTART_MAX": str(MAX_RESTARTS),
        "ENGINE_RESTART_BACKOFF_SECONDS": "0.2",
        "ENGINE_RESTART_BACKOFF_MAX_SECONDS": "1",
        "DRAIN_TIMEOUT_SECONDS": "10",
        **EXPLICIT_CONTROL_ENV,
    }
    server = start_server("--model-repository", str(repository), name="healing", env=env)
    with stopping_cleanly(server):
        yield server


@pytest.fixture
def http(healing: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=healing.base_url, timeout=120) as client:
        yield client


class StreamingClient(threading.Thread):
    """Streams one request after another until told to stop; keeps every outcome."""

    def __init__(self, base_url: str, max_tokens: int = 8, once: bool = False) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.body = {
            "text_input": "Tell me about the sea.",
            "parameters": {"max_tokens": max_tokens, "ignore_eos": True},
        }
        self.once = once
        self.stop = threading.Event()
        self.statuses: list[int] = []
        self.last_events: list[dict[str, Any]] = []
        self.events = 0
        self.ended_at = 0.0

    def run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=120) as client:
            while not self.stop.is_set():
                last: dict[str, Any] = {}
                with client.stream("POST", STREAM, json=self.body) as response:
                    self.statuses.append(response.status_code)
                    for line in response.iter_lines():
                        if line.startswith("data: "):
                            last = json.loads(line.removeprefix("data: "))
                            self.events += 1
                self.last_events.append(last)
                if self.once:
                    break
        self.ended_at = time.monotonic()


def server_rss_mib(server: RunningServer) -> float:
    rss: int = psutil.Process(server.process.pid).memory_info().rss
    return rss / 2**20


def alive(process: psutil.Process) -> bool:
    """Running, and not a zombie waiting for its parent to reap it."""
    try:
        running: bool = process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        return running
    except psutil.NoSuchProcess:
        return False


def engine_processes(server: RunningServer) -> list[psutil.Process]:
    return [
        p for p in psutil.Process(server.process.pid).children(recursive=True) if "VLLM" in p.name()
    ]


def test_a_reload_under_load_fails_no_request(healing: RunningServer, http: httpx.Client) -> None:
    clients = [StreamingClient(healing.base_url) for _ in range(8)]
    for client in clients:
        client.start()
    assert wait_for(lambda: all(c.events for c in clients), 60)
    old_engines = engine_processes(healing)
    # a new engine starting beside 8 busy streams: 1-2.5 min here, far longer on a slow host
    response = http.post(LOAD, timeout=900)
    assert response.status_code == 200, response.text
    time.sleep(2)
    for client in clients:
        client.stop.set()
    for client in clients:
        client.join(60)
    statuses = [s for c in clients for s in c.statuses]
    failures = [e for c in clients for e in c.last_events if "error" in e]
    assert set(statuses) == {200} and not failures, (set(statuses), failures[:3])
    assert len(statuses) > 8 * 3
    assert not any(alive(p) for p in old_engines), "the old engine's processes are still running"
    assert http.post(GENERATE, json=GREEDY).status_code == 200


def test_a_reload_with_a_broken_model_json_keeps_the_old_engine(
    http: httpx.Client, repository: Path
) -> None:
    model_json = repository / "smollm2" / "1" / "model.json"
    good = model_json.read_text()
    model_json.write_text(json.dumps({**json.loads(good), "max_model_length": 5}))
    try:
        response = http.post(LOAD)
    finally:
        model_json.write_text(good)
    assert response.status_code == 400
    assert (
        "unknown vLLM engine arguments: 'max_model_length' (did you mean 'max_model_len'?)"
        in response.json()["error"]
    )
    assert http.get("/v2/models/smollm2/ready").status_code == 200
    assert http.post(GENERATE, json=GREEDY).status_code == 200


def reload_and_chat(http: httpx.Client) -> None:
    """A reload, then a chat request to the new engine (its first chat render)."""
    assert http.post(LOAD).status_code == 200
    assert http.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_memory_returns_to_its_level_after_reloads(
    healing: RunningServer, http: httpx.Client
) -> None:
    reload_and_chat(http)
    after_first = server_rss_mib(healing)
    for _ in range(4):
        reload_and_chat(http)
    after_fifth = server_rss_mib(healing)
    assert after_fifth <= 1.06 * after_first, (
        f"RSS {after_first:.0f} MiB after the first reload, {after_fifth:.0f} after the fifth"
    )
