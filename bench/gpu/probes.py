"""What the GPU run reads about the server while it measures: the CPU each process used, how
busy the whole machine was, and py-spy records of its busiest processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
PROFILE_SECONDS = 3


def process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def cpu_seconds(pids: list[int]) -> dict[str, float]:
    """CPU seconds by process name (comm) over the given processes."""
    by_name: dict[str, float] = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        by_name[f"{name}:{pid}"] = (int(fields[11]) + int(fields[12])) / TICK
    return by_name


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def machine_busy(before: tuple[float, float], after: tuple[float, float]) -> float:
    """Busy CPUs on average between two machine_cpu() readings."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return round(os.cpu_count() * busy / total, 2) if total else float("nan")


def record_profiles(server: int, out: Path, settle: float = 0.5) -> list[subprocess.Popen]:
    """py-spy records (collapsed stacks, by thread) of the server's two busiest processes,
    chosen over the level's first second; idle samples are left out. (Without setproctitle
    every process is `python3`: the threads name them, the engine core's own are
    `process_input_sockets` and `process_output_sockets`.) `settle`: seconds to wait first."""
    time.sleep(settle)
    first = cpu_seconds(process_tree(server))
    time.sleep(0.5)
    second = cpu_seconds(process_tree(server))
    busiest = sorted(((second[k] - first.get(k, 0.0), k) for k in second), reverse=True)[:2]
    out.mkdir(parents=True, exist_ok=True)
    profilers = []
    for rank, (_, name) in enumerate(busiest, 1):
        pid = name.rsplit(":", 1)[1]
        argv = ["py-spy", "record", "--pid", pid, "--duration", str(PROFILE_SECONDS), "--rate", "250",
                "--nonblocking", "--threads", "--format", "raw", "--output", str(out / f"busiest-{rank}-{pid}.txt")]
        profilers.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    return profilers
