"""The engine processes' guardian: a small process of its own, run as a script (it imports
nothing of the server), that outlives the server process which started it.

It reads lines from its standard input, which only the server holds open:

    watch <pid> <create_time>     an engine process of the server
    forget <pid>                  that process was stopped by the server

When the input ends, the server is gone, however it ended (a clean exit, SIGKILL, the kernel's
OOM killer): every process still watched, and its descendants, is killed, so that no engine
core or worker keeps the machine's memory (or its GPUs) after the server.
"""

from __future__ import annotations

import signal
import sys

import psutil

WAIT_SECONDS = 10.0


def read_watched(lines: object) -> dict[int, float]:
    """The processes watched when the input ended: pid -> create time."""
    watched: dict[int, float] = {}
    for line in lines:  # type: ignore[attr-defined]
        command, *values = line.split()
        if command == "watch" and len(values) == 2:
            watched[int(values[0])] = float(values[1])
        elif command == "forget" and len(values) == 1:
            watched.pop(int(values[0]), None)
    return watched


def still_running(watched: dict[int, float]) -> list[psutil.Process]:
    """The watched processes that are still the ones watched (a pid reused since is not),
    and all of their descendants."""
    found: dict[int, psutil.Process] = {}
    for pid, created in watched.items():
        try:
            process = psutil.Process(pid)
            if abs(process.create_time() - created) > 0.01:
                continue
            for member in [process, *process.children(recursive=True)]:
                found[member.pid] = member
        except psutil.Error:
            continue
    return list(found.values())


def kill_all(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(processes, timeout=WAIT_SECONDS)


def main() -> None:
    # Signals sent to the server's process group (Ctrl-C in a terminal) are the server's to
    # handle: this process ends when the server does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kill_all(still_running(read_watched(sys.stdin)))


if __name__ == "__main__":
    main()
