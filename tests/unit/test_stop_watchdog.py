"""The hard bound on a stop: the first signal arms a watchdog that, the drain timeout plus
SHUTDOWN_GRACE_SECONDS later, kills every process the server started and exits 1 (the real
server with a hung engine: tests/integration/test_stop_bound_real_engine.py)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi import FastAPI

from app.launch.server import DrainingServer, stop_watchdog
from app.multiprocess.stop_watchdog import STOP_OVERRUN_EXIT_CODE, StopWatchdog
from app.settings import Settings


class Ending:
    """Stands in for killing the processes and exiting: records that it happened."""

    def __init__(self) -> None:
        self.killed = threading.Event()
        self.exit_codes: list[int] = []
        self.exited = threading.Event()

    def kill(self) -> int:
        self.killed.set()
        return 3

    def exit(self, code: int) -> None:
        self.exit_codes.append(code)
        self.exited.set()


@pytest.fixture(autouse=True)
def event_loop_set() -> Iterator[None]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


def test_once_armed_it_kills_the_processes_and_exits_1_when_its_time_is_up() -> None:
    ending = Ending()
    watchdog = StopWatchdog(0.05, ending.kill, ending.exit)
    watchdog.arm()
    watchdog.arm()
    assert ending.exited.wait(10)
    assert ending.killed.is_set() and ending.exit_codes == [STOP_OVERRUN_EXIT_CODE] == [1]


def test_unarmed_or_disarmed_it_does_nothing() -> None:
    ending = Ending()
    StopWatchdog(0.01, ending.kill, ending.exit)
    disarmed = StopWatchdog(0.2, ending.kill, ending.exit)
    disarmed.arm()
    disarmed.disarm()
    assert not ending.exited.wait(0.5)


def test_the_first_signal_arms_it_and_its_time_is_the_drain_timeout_plus_the_grace() -> None:
    app = FastAPI()
    app.state.settings = Settings(drain_timeout_seconds=2, shutdown_grace_seconds=3)
    watchdog = stop_watchdog(app)
    assert watchdog is not None and watchdog.seconds == 5
    assert Settings().shutdown_grace_seconds == 8
    armed = []
    watchdog.arm = lambda: armed.append(True)  # type: ignore[method-assign]
    server = DrainingServer(uvicorn.Config(app), app, watchdog=watchdog)
    server.handle_exit(signal.SIGTERM, None)
    assert armed == [True]
    assert stop_watchdog(FastAPI()) is None


KILL_TREE = """
import subprocess, sys, time
import psutil
from app.multiprocess.stop_watchdog import kill_descendants
child = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"])
deadline = time.monotonic() + 30
while len(psutil.Process().children(recursive=True)) < 3 and time.monotonic() < deadline:
    time.sleep(0.05)
tree = psutil.Process().children(recursive=True)
killed = kill_descendants()
psutil.wait_procs(tree, timeout=10)
print(killed, sum(p.is_running() and p.status() != "zombie" for p in tree))
"""


def test_it_kills_every_process_the_server_started_however_deep() -> None:
    """Run in a process of its own: here it would also kill what other tests started."""
    result = subprocess.run(
        [sys.executable, "-c", KILL_TREE], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3", "0"]
