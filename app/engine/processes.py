"""The operating-system processes of one engine: found when it starts, made sure to be gone
when it stops (a killed engine core leaves its workers to themselves)."""

from __future__ import annotations

import logging
from typing import Any

import psutil

logger = logging.getLogger(__name__)

STOP_WAIT_SECONDS = 5.0


def engine_processes(llm: Any) -> list[psutil.Process]:
    """The engine-core processes an `AsyncLLM` started, and all of their descendants (none
    for a client of a core started elsewhere)."""
    manager = getattr(getattr(getattr(llm, "engine_core", None), "resources", None), "engine_manager", None)
    return engine_processes_of(manager)


def engine_processes_of(manager: Any) -> list[psutil.Process]:
    """The processes of vLLM's engine-core manager, and all of their descendants."""
    found: list[psutil.Process] = []
    for process in getattr(manager, "processes", ()):
        try:
            core = psutil.Process(process.pid)
            found += [core, *core.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


def kill_survivors(processes: list[psutil.Process]) -> None:
    """SIGKILL those still running (not zombies) and wait for them, briefly."""
    survivors = [p for p in processes if running(p)]
    for process in survivors:
        logger.warning("killing engine process %s (pid %d), left running", process.name(), process.pid)
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(survivors, timeout=STOP_WAIT_SECONDS)


def running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
