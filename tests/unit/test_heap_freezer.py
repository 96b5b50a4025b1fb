"""The heap frozen after start-up (full collections skip it while serving), and thawed for
each repository change: an engine stopped by an unload, a reload or a restart is still
collected, even in a reference cycle (as vLLM's engines are)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.main import create_app
from app.repository.heap_freezer import HeapFreezer
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.clients import started_clients
from tests.support.repository import EXPLICIT_CONTROL
from tests.support.waiting import wait_for

BODY = {"text_input": "x", "parameters": {"max_tokens": 2}}


class CyclicEngine(FakeEngine):
    """An engine in a reference cycle: only the cycle collector frees it."""

    def __init__(self) -> None:
        super().__init__()
        self.itself = self


class WeakEngines:
    """An engine factory that keeps only weak references to the engines it made."""

    def __init__(self) -> None:
        self.made: list[weakref.ref[CyclicEngine]] = []

    def __call__(self, spec: object) -> CyclicEngine:
        engine = CyclicEngine()
        self.made.append(weakref.ref(engine))
        return engine

    def alive(self) -> list[bool]:
        """Whether each engine made is still in memory, after a full collection (as
        `return_freed_memory` runs when a vLLM engine stops)."""
        gc.collect()
        return [ref() is not None for ref in self.made]


def heap_app(repository: Path, **overrides: Any) -> tuple[FastAPI, WeakEngines]:
    """An app of `WeakEngines` with the heap freeze on (tests/unit/conftest.py turns it off)."""
    gc.unfreeze()
    engines = WeakEngines()
    options = {
        **EXPLICIT_CONTROL,
        "freeze_gc_heap": True,
        "engine_probe_interval_seconds": 0,
        "engine_restart_backoff_seconds": 0.01,
        **overrides,
    }
    settings = Settings(model_repository=[repository], **options)
    return create_app(settings, engine_factory=engines), engines


@pytest.fixture
def served(repository: Path) -> Iterator[Callable[..., tuple[TestClient, WeakEngines]]]:
    with started_clients() as start:

        def build(**settings: Any) -> tuple[TestClient, WeakEngines]:
            app, engines = heap_app(repository, **settings)
            return start(app), engines

        yield build


def test_the_heap_is_frozen_once_the_app_started(
    served: Callable[..., tuple[TestClient, WeakEngines]],
) -> None:
    client, engines = served()
    assert gc.get_freeze_count() > 0
    assert engines.alive() == [True]
    assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200


def test_an_unloaded_engine_in_a_cycle_is_collected_and_the_heap_frozen_again(
    served: Callable[..., tuple[TestClient, WeakEngines]],
) -> None:
    client, engines = served()
    assert client.post("/v2/repository/models/fake/unload").status_code == 200
    assert engines.alive() == [False]
    assert gc.get_freeze_count() > 0


@pytest.mark.parametrize("in_place", [False, True])
def test_a_reloaded_engine_in_a_cycle_is_collected(
    served: Callable[..., tuple[TestClient, WeakEngines]], in_place: bool
) -> None:
    client, engines = served(reload_in_place=in_place)
    for _ in range(3):
        assert client.post("/v2/repository/models/fake/load").status_code == 200
    assert engines.alive() == [False, False, False, True]
    assert gc.get_freeze_count() > 0
    assert client.post("/v2/models/fake/generate", json=BODY).status_code == 200


def test_an_engine_replaced_after_a_crash_is_collected(
    served: Callable[..., tuple[TestClient, WeakEngines]],
) -> None:
    client, engines = served()
    failed = engines.made[0]()
    assert failed is not None
    failed.healthy = False
    del failed
    assert wait_for(
        lambda: len(engines.made) == 2 and client.get("/v2/health/ready").status_code == 200
    )
    assert wait_for(lambda: gc.get_freeze_count() > 0)
    assert engines.alive() == [False, True]


def test_the_heap_is_released_when_the_app_stops(repository: Path) -> None:
    app, _ = heap_app(repository)
    with TestClient(app):
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_with_freeze_gc_heap_off_nothing_is_frozen(
    served: Callable[..., tuple[TestClient, WeakEngines]],
) -> None:
    client, _ = served(freeze_gc_heap=False)
    assert gc.get_freeze_count() == 0
    assert client.post("/v2/repository/models/fake/load").status_code == 200
    assert gc.get_freeze_count() == 0


def test_the_heap_stays_thawed_until_the_last_of_overlapping_changes_ends() -> None:
    heap = HeapFreezer()
    heap.freeze()
    assert heap.frozen and gc.get_freeze_count() > 0
    with heap.thawed():
        assert gc.get_freeze_count() == 0
        with heap.thawed():
            pass
        heap.freeze()
        assert not heap.frozen and gc.get_freeze_count() == 0
    assert heap.frozen and gc.get_freeze_count() > 0
    heap.release()
    assert not heap.frozen and gc.get_freeze_count() == 0
