"""A hard bound on how long a stop may take. Armed by the first SIGTERM or SIGINT, it waits
the drain timeout plus a grace on a thread of its own; if the process is still there then
(an engine hung, loading or restarting can hold a graceful stop for minutes: a thread
building an engine cannot be interrupted, and the interpreter waits for it before it exits),
it kills every process this one started and exits non-zero."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

import psutil

logger = logging.getLogger(__name__)

STOP_OVERRUN_EXIT_CODE = 1
"""The exit status of a stop the watchdog ended."""
LOG_WAIT_SECONDS = 1.0
"""How long the last log line is given to be written before the exit."""


class StopWatchdog:
    """Ends the process `seconds` after `arm` unless it ended first."""

    def __init__(
        self,
        seconds: float,
        kill: Callable[[], int] | None = None,
        exit_process: Callable[[int], object] = os._exit,
    ) -> None:
        self.seconds = seconds
        self._kill = kill or kill_descendants
        self._exit = exit_process
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        """Start counting (once: a later call changes nothing)."""
        if self._timer is not None:
            return
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.name = "stop watchdog"
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _fire(self) -> None:
        killed = self._kill()
        message = (
            "the stop still runs %.0f s after the signal (DRAIN_TIMEOUT_SECONDS + "
            "SHUTDOWN_GRACE_SECONDS): killed %d processes it started, exiting %d"
        )
        # logged from a thread of its own: a handler blocked elsewhere cannot hold the exit
        note = threading.Thread(
            target=logger.error,
            args=(message, self.seconds, killed, STOP_OVERRUN_EXIT_CODE),
            daemon=True,
        )
        note.start()
        note.join(LOG_WAIT_SECONDS)
        self._exit(STOP_OVERRUN_EXIT_CODE)


def kill_descendants() -> int:
    """SIGKILL every process this one started (engine cores, their workers, frontend
    processes), however deep; how many there were. (Not waited for: nothing blocks SIGKILL.)"""
    try:
        processes = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            continue
    return len(processes)
