"""The guardian kills the engine processes a server leaves behind when it dies, however it
dies: a stand-in server (a Python process) starts "engine" processes (a process with a child
of its own), tells its guardian of them and is killed with SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from app.engine import guardian
from app.paths import PROJECT_ROOT
from tests.support.waiting import wait_until

SERVER = textwrap.dedent(
    """
    import subprocess, sys, time
    import psutil
    from app.engine.processes import GUARDIAN, kill_survivors

    def engine():
        # an engine core with a worker of its own, as vLLM's multiprocess executor starts it
        code = "import subprocess, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"
        return psutil.Process(subprocess.Popen([sys.executable, '-c', code]).pid)

    watched, stopped = engine(), engine()
    time.sleep(0.5)
    GUARDIAN.watch([watched, *watched.children()])
    GUARDIAN.watch([stopped])
    kill_survivors([stopped])
    print(watched.pid, GUARDIAN.pid, flush=True)
    time.sleep(600)
    """
)


def descendants_alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_engine_processes_die_with_the_server(sig: int) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    spawned: list[psutil.Process] = []
    try:
        engine_pid, guardian_pid = map(int, server.stdout.readline().split())
        engine = psutil.Process(engine_pid)
        wait_until(lambda: len(engine.children()) == 1)
        engine_processes = [engine, *engine.children()]
        spawned = psutil.Process(server.pid).children(recursive=True)
        guardian_process = psutil.Process(guardian_pid)
        assert guardian_process.ppid() == server.pid
        server.send_signal(sig)
        server.wait(timeout=30)
        wait_until(lambda: not descendants_alive(engine_processes), timeout=30)
        wait_until(
            lambda: (
                not guardian_process.is_running()
                or guardian_process.status() == psutil.STATUS_ZOMBIE
            )
        )
    finally:
        # only what this test started: the suite's own servers are children of pytest too
        for process in spawned:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        server.kill()
        server.wait(timeout=30)
        server.stdout.close()


def test_the_guardian_kills_only_the_processes_it_still_watches(tmp_path: Path) -> None:
    """A stopped engine's processes are forgotten; a pid whose process changed (reused) is
    left alone."""
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    try:
        watched, forgotten, reused = (psutil.Process(p.pid) for p in sleepers)
        lines = [
            f"watch {watched.pid} {watched.create_time()!r}",
            f"watch {forgotten.pid} {forgotten.create_time()!r}",
            f"forget {forgotten.pid}",
            f"watch {reused.pid} {reused.create_time() - 100!r}",
        ]
        guardian.kill_all(guardian.still_running(guardian.read_watched(lines)))
        sleepers[0].wait(timeout=10)  # killed (and reaped by the guardian's wait)
        assert sleepers[1].poll() is None and sleepers[2].poll() is None
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def ignored_signals(pid: int) -> set[int]:
    """The signals a process ignores (SIG_IGN): the SigIgn mask of /proc/<pid>/status, whose
    bit n-1 is signal n."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return set()
    mask = next(
        int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigIgn:")
    )
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


def test_the_guardian_ignores_the_terminals_signals() -> None:
    """Ctrl-C reaches the server's whole process group: the guardian waits for the server."""
    process = subprocess.Popen(
        [sys.executable, str(Path(guardian.__file__))], stdin=subprocess.PIPE, text=True
    )
    try:
        # sent once it ignores both (SIGINT may be ignored from the start: a background job's)
        terminals = {signal.SIGINT, signal.SIGTERM}
        wait_until(lambda: terminals <= ignored_signals(process.pid), timeout=30)
        os.kill(process.pid, signal.SIGINT)
        os.kill(process.pid, signal.SIGTERM)
        time.sleep(0.5)
        assert process.poll() is None and process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
