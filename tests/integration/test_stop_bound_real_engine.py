"""SIGTERM ends the server within the drain timeout plus 10 s whatever its engine does: here
the engine core started by a restart is stopped (SIGSTOP) while it loads, so the restart
never finishes and a graceful stop would wait for it (vLLM gives a starting core 10
minutes); the watchdog kills the processes left and the server exits 1."""

from __future__ import annotations

import signal
import time

import psutil

from tests.support.processes import engine_cores
from tests.support.servers import kill_tree, start_server
from tests.support.waiting import wait_for

DRAIN_TIMEOUT_S = 2
SHUTDOWN_GRACE_S = 5
BOUND_S = DRAIN_TIMEOUT_S + 10
"""What the server promises: out within the drain timeout plus 10 s."""


def restarting_cores(pid: int, killed: psutil.Process) -> list[psutil.Process]:
    """The engine cores started since `killed` was."""
    return [process for process in engine_cores(pid) if process.pid != killed.pid]


def test_sigterm_while_a_restarting_engine_hangs_exits_within_the_drain_timeout_plus_10_s() -> None:
    env = {
        "DRAIN_TIMEOUT_SECONDS": str(DRAIN_TIMEOUT_S),
        "SHUTDOWN_GRACE_SECONDS": str(SHUTDOWN_GRACE_S),
        "ENGINE_RESTART_BACKOFF_SECONDS": "0.2",
    }
    server = start_server(name="stop-bound", env=env)
    try:
        (first,) = engine_cores(server.process.pid)
        first.kill()
        assert wait_for(lambda: bool(restarting_cores(server.process.pid, first)), 120, 0.02)
        (starting,) = restarting_cores(server.process.pid, first)
        starting.suspend()
        descendants = psutil.Process(server.process.pid).children(recursive=True)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(timeout=BOUND_S + 60)
        stopped_after = time.monotonic() - signalled
        _, alive = psutil.wait_procs(descendants, timeout=10)
    finally:
        kill_tree(server.process)
    log = server.log_tail(60)
    assert stopped_after <= BOUND_S, f"exited {stopped_after:.1f} s after SIGTERM\n{log}"
    assert code == 1 and "the stop still runs 7 s after the signal" in log, (code, log)
    assert not alive, f"processes left running: {alive}"
