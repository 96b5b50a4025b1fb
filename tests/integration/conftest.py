"""One real server (python -m app with the default smollm2 repository) per test session."""

from __future__ import annotations

import fcntl
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.servers import RunningServer, start_server

SEVERAL_ENGINES_LOCK = Path(__file__).parents[1] / "artifacts" / "several-engines.lock"
"""Held by a module whose servers run several engines at once (see `several_engines`)."""
EXIT_NOISE = ("doesn't include CPU backend", "nanobind: leaked")
"""What a server's log never holds: vLLM's note that OpenAI's Triton compiler has no CPU backend
(any process), nanobind's leak report after a frozen heap (at exit)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.integration)
            # warnings are shown, not errors, against the real servers (the unit tier's gate)
            item.add_marker(pytest.mark.filterwarnings("default"))


@pytest.fixture(scope="session")
def server() -> Iterator[RunningServer]:
    """The shared real server; stopping it at the end also checks a clean shutdown."""
    running = start_server(name="session")
    yield running
    code, alive = running.stop(signal.SIGTERM)
    for process in alive:
        process.kill()
    assert code == 0, f"server exited with {code} on SIGTERM:\n{running.log_tail()}"
    assert not alive, f"engine processes left running after shutdown: {alive}"
    log = running.log_path.read_text(errors="replace")
    assert "Traceback" not in log, running.log_tail(80)
    for noise in EXIT_NOISE:
        assert noise not in log, f"{noise!r} in the log:\n{running.log_tail(80)}"


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def several_engines() -> Iterator[None]:
    """For a module whose servers run several engines at once: `make test` runs the engine
    tier in two halves side by side, and two such modules together would not fit in 24 GiB
    beside the session's server (each engine of the default model holds some 2-3 GiB)."""
    SEVERAL_ENGINES_LOCK.parent.mkdir(exist_ok=True)
    with SEVERAL_ENGINES_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
