"""A level of the GPU run: K load-generator processes against one server started on a common
barrier, or (C = 1) one load generator taking several servers in turn; their samples merged,
with the server CPU per process and the machine's busy CPUs (and, interleaved, vLLM's own
per-request timings from each server's /metrics)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.gpu.engine import LOADGEN
from bench.gpu.loadgen_samples import slow_itl_at
from bench.gpu.probes import (
    cpu_seconds,
    machine_busy,
    machine_cpu,
    process_tree,
    record_profiles,
    server_latency_ms,
    vllm_latency_totals,
)

if TYPE_CHECKING:
    from bench.gpu.servers import Server

START_DELAY = 3.0
"""Seconds from spawning a level's load-generator processes to their common start (they
start and warm up meanwhile)."""

INTERLEAVED_START_DELAY = 6.0
"""The same for the interleaved C = 1 level, whose one load generator warms every server in
turn; the servers' /metrics are read a second before its start."""


def percentile(values: list[float], p: float) -> float:
    values = sorted(v for v in values if not math.isnan(v))
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


def mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


def run_level(
    server: Server,
    shape: str,
    c: int,
    requests: int,
    clients: int,
    raw_dir: Path,
    tokens: int,
    profile: Path | None = None,
) -> dict[str, Any]:
    start_at = time.time() + START_DELAY
    procs, raws = [], []
    for index in range(clients):
        raw = raw_dir / f"{shape}-{server.target}-c{c}-{index}.json"
        raws.append(raw)
        argv = [
            sys.executable,
            str(LOADGEN),
            "--target",
            server.kind,
            "--url",
            server.load_url,
            "--model",
            shape,
            "--levels",
            f"{c // clients}:{requests}",
            "--tokens",
            str(tokens),
            "--start-at",
            str(start_at),
            "--wid-base",
            str(index * 10000),
            "--raw",
            str(raw),
        ]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    time.sleep(max(0.0, start_at - time.time()))
    before = cpu_seconds(process_tree(server.process.pid))
    machine_before = machine_cpu()
    profilers = record_profiles(server.process.pid, profile) if profile is not None else []
    outputs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    after = cpu_seconds(process_tree(server.process.pid))
    busy = machine_busy(machine_before, machine_cpu())
    for profiler in profilers:
        profiler.wait()
    samples = [json.loads(r.read_text()) for r in raws]
    wall = max(s["t_end"] for s in samples) - min(s["t_start"] for s in samples)
    used = {
        k: round(after[k] - before.get(k, 0.0), 2)
        for k in after
        if after[k] - before.get(k, 0.0) > 0.05
    }
    return {**merged(c, samples, wall, outputs, used, tokens), "machine_busy_cpus": busy}


def run_interleaved(
    servers: list[Server], shape: str, requests: int, raw_dir: Path, tokens: int
) -> dict[str, dict[str, Any]]:
    """C = 1 with one load generator sending request r to every server in turn: each server's
    level, its tok/s over the time its own requests took (so the machine's drift cancels),
    and vLLM's own timings of them (`server_ms`) where the server exports them."""
    start_at = time.time() + INTERLEAVED_START_DELAY
    raw = raw_dir / f"{shape}-interleaved-c1"
    targets = [{"name": s.target, "kind": s.kind, "url": s.load_url} for s in servers]
    argv = [
        sys.executable,
        str(LOADGEN),
        "--interleave",
        json.dumps(targets),
        "--model",
        shape,
        "--levels",
        f"1:{requests}",
        "--tokens",
        str(tokens),
        "--start-at",
        str(start_at),
        "--raw",
        str(raw),
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    time.sleep(max(0.0, start_at - 1.0 - time.time()))
    timings_before = {s.target: vllm_latency_totals(s.url) for s in servers}
    time.sleep(max(0.0, start_at - time.time()))
    before = {s.target: cpu_seconds(process_tree(s.process.pid)) for s in servers}
    machine_before = machine_cpu()
    outputs = json.loads(process.communicate()[0].strip().splitlines()[-1])
    busy = machine_busy(machine_before, machine_cpu())
    timings = {
        s.target: server_latency_ms(timings_before[s.target], vllm_latency_totals(s.url))
        for s in servers
    }
    levels = {}
    for server in servers:
        after = cpu_seconds(process_tree(server.process.pid))
        used = {
            k: round(after[k] - before[server.target].get(k, 0.0), 2)
            for k in after
            if after[k] - before[server.target].get(k, 0.0) > 0.05
        }
        sample = json.loads(raw.with_name(f"{raw.name}.{server.target}.json").read_text())
        level = merged(1, [sample], sample["busy_s"], [outputs[server.target]], used, tokens)
        levels[server.target] = {
            **level,
            "e2e_mean_ms": round(1000 * sample["busy_s"] / max(sample["done"], 1), 2),
            "interleaved": True,
            "machine_busy_cpus": busy,
        }
        if timings[server.target]:
            levels[server.target]["server_ms"] = timings[server.target]
    return levels


def merged(
    c: int,
    samples: list[dict[str, Any]],
    wall: float,
    outputs: list[dict[str, Any]],
    server_cpu: dict[str, float],
    tokens: int,
) -> dict[str, Any]:
    ttft = [x for s in samples for x in s["ttft"]]
    itl = [x for s in samples for x in s["itl"]]
    positions = [x for s in samples for x in s.get("itl_pos", [])]
    done = sum(s["done"] for s in samples)
    return {
        "c": c,
        "requests": done,
        "errors": sum(s["errors"] for s in samples),
        "tok_s": round(done * tokens / wall, 1),
        "ttft_mean_ms": round(1000 * mean(ttft), 2),
        "itl_mean_ms": round(1000 * mean(itl), 3),
        "ttft_p50_ms": round(1000 * percentile(ttft, 50), 1),
        "ttft_p99_ms": round(1000 * percentile(ttft, 99), 1),
        "itl_p50_ms": round(1000 * percentile(itl, 50), 2),
        "itl_p99_ms": round(1000 * percentile(itl, 99), 2),
        "slow_itl_at": slow_itl_at(itl, positions) if len(positions) == len(itl) else {},
        "client_cpu_util": [o.get("client_cpu_util") for o in outputs],
        "server_cpu_s": server_cpu,
        "server_cpu_us_per_token": round(1e6 * sum(server_cpu.values()) / max(done * tokens, 1), 1),
    }
