"""The processes a server started, as tests look for them while they come and go."""

from __future__ import annotations

import psutil

__all__ = ["engine_cores"]


def engine_cores(pid: int) -> list[psutil.Process]:
    """The engine-core processes below `pid` that are running (not zombies); one that ends
    while they are listed is left out, not an error."""
    cores = []
    for process in psutil.Process(pid).children(recursive=True):
        try:
            if "EngineCor" in process.name() and process.status() != psutil.STATUS_ZOMBIE:
                cores.append(process)
        except psutil.NoSuchProcess:
            continue
    return cores
