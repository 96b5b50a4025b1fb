"""What the GPU run reads about the server while it measures: the CPU each process used, how
busy the whole machine was, vLLM's own per-request timings from its /metrics, and py-spy
records of its busiest processes."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

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
    return round((os.cpu_count() or 1) * busy / total, 2) if total else float("nan")


def record_profiles(server: int, out: Path, settle: float = 0.5) -> list[subprocess.Popen[bytes]]:
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
        argv = [
            "py-spy",
            "record",
            "--pid",
            pid,
            "--duration",
            str(PROFILE_SECONDS),
            "--rate",
            "250",
            "--nonblocking",
            "--threads",
            "--format",
            "raw",
            "--output",
            str(out / f"busiest-{rank}-{pid}.txt"),
        ]
        profilers.append(
            subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        )
    return profilers


LATENCIES = {
    "ttft": "vllm:time_to_first_token_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
}
"""vLLM's per-request histograms that both servers export, fed by the same vLLM statistics:
TTFT from the request's arrival in the frontend to its first token back there; queue,
prefill and decode from the engine core's timestamps."""


def vllm_latency_totals(url: str) -> dict[str, float]:
    """The sum and count of each of `LATENCIES` on a server's /metrics (over every label set
    and API process), and its generated tokens; {} where it exposes none of them."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    totals = {}
    for key, name in LATENCIES.items():
        if f"{name}_count" in samples:
            totals[f"{key}_sum"], totals[f"{key}_count"] = (
                samples[f"{name}_sum"],
                samples[f"{name}_count"],
            )
    if totals and "vllm:generation_tokens_total" in samples:
        totals["tokens"] = samples["vllm:generation_tokens_total"]
    return totals


def server_latency_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Between two `vllm_latency_totals`: the mean ms a request of each latency, and the
    engine's decode time per token gap (`decode_per_token`); {} without both readings."""
    means: dict[str, float] = {}
    for key in LATENCIES:
        count = after.get(f"{key}_count", 0.0) - before.get(f"{key}_count", 0.0)
        if count > 0:
            means[key] = round(
                1000 * (after[f"{key}_sum"] - before.get(f"{key}_sum", 0.0)) / count, 3
            )
    finished = after.get("decode_count", 0.0) - before.get("decode_count", 0.0)
    gaps = after.get("tokens", 0.0) - before.get("tokens", 0.0) - finished
    if "decode" in means and gaps > 0:
        means["decode_per_token"] = round(means["decode"] * finished / gaps, 3)
    return means
