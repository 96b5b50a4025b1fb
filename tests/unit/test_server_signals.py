"""How the server takes SIGTERM and SIGINT: alone, the first drains and the second stops at
once; as one frontend process of several, SIGINT and a repeated SIGTERM are left to the
supervisor, which forwards one SIGTERM (Ctrl-C and systemd signal every process)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi import FastAPI

from app.launch.server import SAME_STOP_SECONDS, DrainingServer


@pytest.fixture(autouse=True)
def event_loop_set() -> Iterator[None]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


def a_server(supervised: bool) -> DrainingServer:
    app = FastAPI()
    return DrainingServer(uvicorn.Config(app), app, supervised=supervised)


def state(server: DrainingServer) -> tuple[bool, bool]:
    """(draining, stopping at once)."""
    return server._draining, server.force_exit


def test_alone_the_first_signal_drains_and_the_second_stops_at_once() -> None:
    server = a_server(supervised=False)
    server.handle_exit(signal.SIGINT, None)
    assert state(server) == (True, False)
    server.handle_exit(signal.SIGINT, None)
    assert state(server) == (True, True)


def test_a_supervised_process_leaves_sigint_to_its_supervisor() -> None:
    server = a_server(supervised=True)
    server.handle_exit(signal.SIGINT, None)
    assert state(server) == (False, False)
    server.handle_exit(signal.SIGTERM, None)
    assert state(server) == (True, False)


def test_a_supervised_process_takes_a_sigterm_soon_after_the_first_as_the_same_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("app.launch.server.time.monotonic", lambda: now[0])
    server = a_server(supervised=True)
    server.handle_exit(signal.SIGTERM, None)
    server.handle_exit(signal.SIGTERM, None)
    assert state(server) == (True, False)
    now[0] += SAME_STOP_SECONDS + 0.1
    server.handle_exit(signal.SIGTERM, None)
    assert state(server) == (True, True)
