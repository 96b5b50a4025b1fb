"""The operating-system processes of one engine: found when it starts, made sure to be gone
when it stops (a killed engine core leaves its workers to themselves), and when this process
dies without stopping them (SIGKILL, the OOM killer): vLLM's engine core does not watch the
process that started it, so a guardian process (app/engine/guardian.py) does."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import psutil

logger = logging.getLogger(__name__)

STOP_WAIT_SECONDS = 5.0
GUARDIAN_SCRIPT = Path(__file__).with_name("guardian.py")


class EngineGuardian:
    """This process's guardian: started with the first engine process it is told of, told of
    each one started and stopped; it kills those left once this process is gone. Its input is
    a pipe only this process holds (pipes are not inherited by the processes it starts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def watch(self, processes: list[psutil.Process]) -> None:
        self._send([f"watch {p.pid} {p.create_time()!r}" for p in processes if running(p)])

    def forget(self, processes: list[psutil.Process]) -> None:
        self._send([f"forget {p.pid}" for p in processes])

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _send(self, lines: list[str]) -> None:
        if not lines:
            return
        with self._lock:
            try:
                stdin = self._input()
                stdin.write("".join(f"{line}\n" for line in lines))
                stdin.flush()
            except OSError:
                logger.warning(
                    "the engine processes' guardian is gone: engine processes are not watched"
                )

    def _input(self) -> IO[str]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, str(GUARDIAN_SCRIPT)],
                stdin=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        assert self._process.stdin is not None
        return self._process.stdin


GUARDIAN = EngineGuardian()


def engine_processes(llm: Any) -> list[psutil.Process]:
    """The engine-core processes an `AsyncLLM` started, and all of their descendants (none
    for a client of a core started elsewhere), watched by the guardian."""
    manager = getattr(
        getattr(getattr(llm, "engine_core", None), "resources", None), "engine_manager", None
    )
    return engine_processes_of(manager)


def engine_processes_of(manager: Any) -> list[psutil.Process]:
    """The processes of vLLM's engine-core manager, and all of their descendants, watched by
    the guardian."""
    found: list[psutil.Process] = []
    for process in getattr(manager, "processes", ()):
        try:
            core = psutil.Process(process.pid)
            found += [core, *core.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    GUARDIAN.watch(found)
    return found


def kill_survivors(processes: list[psutil.Process]) -> None:
    """SIGKILL those still running (not zombies) and wait for them, briefly; the guardian
    forgets them."""
    GUARDIAN.forget(processes)
    survivors = [p for p in processes if running(p)]
    for process in survivors:
        logger.warning(
            "killing engine process %s (pid %d), left running", process.name(), process.pid
        )
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(survivors, timeout=STOP_WAIT_SECONDS)


def running(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
