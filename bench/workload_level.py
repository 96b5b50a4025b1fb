"""One level of a realistic workload (bench/realistic.py): K client processes of vLLM's own
client (`vllm bench serve`, bench/vllm_client.py) against one target, started together on a
barrier; their result files merged into the level, with the CPU each server process used and,
on request, py-spy records of them."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from app.paths import PROJECT_ROOT
from bench import engine_stats, workload_report
from bench.gpu.probes import cpu_seconds, machine_busy, machine_cpu, process_tree
from bench.workload_servers import ROUTINGS, Endpoint
from bench.workloads import Scale, workload

BASE_TARGET = "base-openai"
"""Ours from `--base-tree` (another checkout) over `/v1`: a before/after comparison."""
ENGINE_PROCESSES = ("VLLM::", "EngineCore", "Worker")
"""Names (comm) of the engine's processes; the others serve the protocols."""


def client_argv(
    target: str, endpoint: Endpoint, chat: bool, shape: str, model: Path
) -> list[str] | None:
    """`vllm bench serve`'s backend arguments for a target; None where it has no such API."""
    if target in (*ROUTINGS, "vllm", BASE_TARGET):
        backend, path = (
            ("openai-chat", "/v1/chat/completions") if chat else ("openai", "/v1/completions")
        )
        base = endpoint.http
    elif chat:
        return None
    elif target == "ours-sse":
        backend, base, path = "triton-sse", endpoint.http, f"/v2/models/{shape}/generate_stream"
    else:
        backend, base, path = "triton-grpc", f"grpc://{endpoint.grpc}", ""
    return [
        *("--backend", backend, "--base-url", base, "--endpoint", path, "--model", shape),
        *("--tokenizer", str(model), "--ignore-eos", "--temperature", "0"),
        *("--ready-check-timeout-sec", "0"),
        *("--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99"),
        *("--save-result", "--save-detailed", "--disable-tqdm"),
    ]


def run_level(
    args: argparse.Namespace,
    shape: str,
    name: str,
    target: str,
    endpoint: Endpoint,
    folder: Path,
    round_number: int = 0,
    profile: Path | None = None,
    scale: Scale | None = None,
) -> dict[str, Any] | None:
    """K clients of one workload against one target, started together (round `round_number`'s
    prompts, sized by `scale`, else `args.sizes`); the merged level."""
    model = args.models / shape
    if client_argv(target, endpoint, name == "chat", shape, model) is None:
        return None
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    clients = start_clients(args, shape, name, target, endpoint, folder, round_number, scale)
    wait_for_clients(folder, clients)
    pids = process_tree(endpoint.server.pid)
    engine_before = engine_stats.scrape(endpoint.metrics) if endpoint.metrics else {}
    before, machine_before = cpu_seconds(pids), machine_cpu()
    (folder / "go").touch()
    profilers = []
    if profile is not None:
        profilers = record_all(pids, profile, args.profile_seconds)
    codes = [c.wait() for c in clients]
    after = cpu_seconds(process_tree(endpoint.server.pid))
    engine_after = engine_stats.scrape(endpoint.metrics) if endpoint.metrics else {}
    for profiler in profilers:
        profiler.wait()
    if any(codes):
        tail = (folder / f"{codes.index(next(c for c in codes if c))}.log").read_text()[-1500:]
        return {"failed_level": f"client exit codes {codes}", "log_tail": tail}
    level = merged_level(args, folder, before, after, machine_before)
    return {**level, "engine": engine_stats.level_stats(engine_before, engine_after)}


def start_clients(
    args: argparse.Namespace,
    shape: str,
    name: str,
    target: str,
    endpoint: Endpoint,
    folder: Path,
    round_number: int,
    scale: Scale | None = None,
) -> list[subprocess.Popen[bytes]]:
    """The level's K client processes, each waiting at the barrier in `folder`."""
    scale = scale or args.sizes
    model = args.models / shape
    clients = []
    for index in range(args.clients):
        plan = workload(name, scale, index, args.clients, folder, model, round_number)
        backend = client_argv(target, endpoint, plan.chat, shape, model) or []
        argv = [
            *(sys.executable, "-m", "bench.vllm_client", "--barrier", str(folder), str(index)),
            *("--", *backend, *plan.arguments),
            *("--result-dir", str(folder), "--result-filename", f"{index}.json"),
        ]
        log = (folder / f"{index}.log").open("w")
        clients.append(
            subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
        )
    return clients


def wait_for_clients(folder: Path, clients: list[subprocess.Popen[bytes]]) -> None:
    """Until every client is at the barrier (or one has failed)."""
    while len(list(folder.glob("*.ready"))) < len(clients):
        if any(c.poll() not in (None, 0) for c in clients):
            break
        time.sleep(0.05)


def merged_level(
    args: argparse.Namespace,
    folder: Path,
    before: dict[str, float],
    after: dict[str, float],
    machine_before: tuple[float, float],
) -> dict[str, Any]:
    """The clients' result files as one level, with the CPU each server process used over it
    and the frontend's (every process but the engine's) per generated token."""
    level = workload_report.merge(
        [json.loads((folder / f"{i}.json").read_text()) for i in range(args.clients)]
    )
    used = {
        k: round(after[k] - before.get(k, 0.0), 2)
        for k in after
        if after[k] - before.get(k, 0.0) > 0.05
    }
    frontend = sum(v for k, v in used.items() if not k.startswith(ENGINE_PROCESSES))
    return {
        **level,
        "server_cpu_s": used,
        "server_cpu_us_per_token": round(1e6 * frontend / max(level["output_tokens"], 1), 1),
        "machine_busy_cpus": machine_busy(machine_before, machine_cpu()),
    }


def py_spy() -> str:
    """py-spy: on the PATH, else beside this Python (a virtual environment's)."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or str(beside)


def record_all(pids: list[int], out: Path, seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy records (raw collapsed stacks) of each of the server's processes, and what py-spy
    said of each (`PID.log`)."""
    out.mkdir(parents=True, exist_ok=True)
    time.sleep(1.0)  # past the clients' first requests
    return [
        subprocess.Popen(
            [
                *(py_spy(), "record", "--pid", str(pid), "--duration", f"{seconds:g}"),
                *("--rate", "200", "--nonblocking", "--format", "raw"),
                *("--output", str(out / f"{pid}.txt")),
            ],
            stdout=(out / f"{pid}.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        for pid in pids
    ]
