"""`python -m bench.realistic`: the realistic workloads (bench/workloads.py: variable lengths,
shared prefixes, Poisson arrivals, chat) against ours over OpenAI's `/v1` (`ours-openai`),
Triton's `generate_stream` (`ours-sse`) and Triton's gRPC stream (`ours-grpc`), and against
`vllm serve` with as many API processes (`vllm`), all driven by vLLM's own client
(`vllm bench serve`, bench/vllm_client.py) with K client processes started together.

With `--instances N` each server runs N engines: ours as N instances of the model (one a GPU,
or sharing the CPU), routed as each of ours' targets says (`ours-openai`: by the engines'
load; `ours-cache`: cache-aware; `ours-process`: by each frontend process's own counts), and
`vllm serve` with `--data-parallel-size N`. `--standin PROFILE` replaces the model with the
engine stand-in (bench/standin.py: vLLM's engine core stepping at a GPU's measured pace).

Every server is up at once with the same engine arguments; the workloads run in rounds,
the targets' order rotated each round. `make bench` runs it after `python -m bench`.
Writes results.jsonl (a line per level, with each server process's CPU) and table.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.paths import PROJECT_ROOT
from bench import acceptance, workload_report
from bench.acceptance import ACCEPTANCE
from bench.servers import stop_all
from bench.standin_profiles import PROFILES
from bench.workload_level import BASE_TARGET, run_level
from bench.workload_servers import Endpoint, ServerSpec, ours, vllm
from bench.workloads import SCALES, WORKLOADS

TARGETS = ("ours-openai", "ours-sse", "ours-grpc", "vllm")
"""The default targets; `ours-cache` and `ours-process` are ours over /v1 routed otherwise."""
GPU_ENGINE_ARGS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "max_model_len": 4096}
"""As bench/gpu/run.py's (a longer context: chats reach ~2,300 tokens)."""
STANDIN_ENGINE_ARGS = {
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "max_model_len": 2048,
    "enforce_eager": True,
    "block_size": 16,
    "num_gpu_blocks_override": 4096,
    "distributed_executor_backend": "bench.standin.StandInExecutor",
}
"""The engine stand-in's: a GPU's block size and batch limits, a KV cache of 4,096 blocks."""
GPU_KV_CACHE_GIB = 14
"""Each server's KV cache on a GPU (kv_cache_memory_bytes): the 1b shape's requests at the
GPU scale (256 in flight, up to ~1,900 tokens each) fit without preemption."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.realistic", description=__doc__)
    add = parser.add_argument
    add("--scale", choices=sorted(SCALES), help="default: gpu on a GPU, standin with --standin")
    add("--workloads", default=",".join(WORKLOADS))
    add("--targets", default=",".join(TARGETS))
    add("--rounds", type=int, help="rounds over the targets (default: 2; 1 with --acceptance)")
    add(
        "--acceptance",
        choices=sorted(ACCEPTANCE),
        help="a GPU acceptance run (bench/acceptance.py): its shapes, targets and levels",
    )
    add(
        "--processes",
        type=int,
        help="ours' frontend processes = vLLM's API processes "
        "(default: ours' default on this host, at least 2 on a GPU)",
    )
    add("--clients", type=int, help="client processes a level (default: 1 on a CPU, 4 on a GPU)")
    add("--models", type=Path, default=PROJECT_ROOT / ".cache" / "models")
    add(
        "--shapes",
        help="model folders under --models (default: smollm2 on a CPU, 1b,8b on a GPU; "
        "the GPU shapes are made when missing)",
    )
    add("--base-tree", type=Path, help=f"also run ours from this checkout ({BASE_TARGET})")
    add_size_options(add)
    add_engine_options(add)
    add("--profile", action="store_true", help="py-spy records of each server's processes")
    add(
        "--profile-workload",
        default="variable",
        choices=("variable", "fixed", "prefix", "chat"),
        help="the workload of the profiled level (default: variable)",
    )
    add("--profile-seconds", type=float, default=4, help="how long py-spy records (default: 4)")
    add(
        "--out",
        type=Path,
        default=PROJECT_ROOT / "bench" / "results" / time.strftime("workloads-%Y%m%d-%H%M%S"),
    )
    args = parser.parse_args(argv)
    args.gpu_host = shutil.which("nvidia-smi") is not None and (
        subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    )
    return with_defaults(args)


def add_size_options(add: Callable[..., Any]) -> None:
    """A level's size (each the scale's unless given) and each server's KV cache."""
    add("--prompts", type=int, help="requests a level (default: the scale's)")
    add(
        "--concurrency",
        type=int,
        help="clients in flight in the closed-loop workloads (default: the scale's)",
    )
    add("--input-len", type=int, help="prompt tokens around which they vary (default: the scale's)")
    add("--output-len", type=int, help="new tokens around which they vary (default: the scale's)")
    add(
        "--kv-cache-gib",
        type=float,
        default=GPU_KV_CACHE_GIB,
        help=f"each server's KV cache on a GPU (default: {GPU_KV_CACHE_GIB})",
    )


def add_engine_options(add: Callable[..., Any]) -> None:
    """How many engines each server runs, and the engine stand-in."""
    add("--instances", type=int, default=1, help="engines a server (default: 1)")
    add(
        "--ours-parameters",
        default="",
        help="more config.pbtxt parameters for ours, KEY=VALUE,... "
        "(e.g. INSTANCE_ROUTING_HIT_TOKENS=32)",
    )
    add("--kv-blocks", type=int, help="each engine's KV-cache blocks (num_gpu_blocks_override)")
    add("--standin", choices=sorted(PROFILES), help="the engine stand-in at this GPU's pace")
    add(
        "--standin-slowdown",
        type=float,
        default=40.0,
        help="the stand-in's steps this many times longer (default: 40, for a 2-core host)",
    )


def with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The options left out filled in for this host (a CPU or a GPU) and the scale's sizes."""
    args.levels, args.gpu_engine_args = {}, GPU_ENGINE_ARGS
    if args.acceptance:
        acceptance.apply(args, args.acceptance)
    args.rounds = args.rounds or 2
    args.scale = args.scale or ("standin" if args.standin else "gpu" if args.gpu_host else "cpu")
    args.gpu = args.scale == "gpu"
    overrides = {
        "prompts": args.prompts,
        "concurrency": args.concurrency,
        "input_len": args.input_len,
        "output_len": args.output_len,
    }
    args.sizes = replace(
        SCALES[args.scale], **{k: v for k, v in overrides.items() if v is not None}
    )
    if args.processes is None:
        from app.settings import Settings

        count = Settings().frontend_process_count()
        args.processes = max(count, 2) if args.gpu else count
    args.clients = args.clients or (4 if args.gpu else 1)
    args.shapes = (args.shapes or ("1b,8b" if args.gpu else "smollm2")).split(",")
    return args


def engine_args(args: argparse.Namespace, servers: int) -> dict[str, Any]:
    """The engine arguments every server gets: on a CPU the default model's model.json with
    the CPU defaults ours would add (written out, so that vLLM's server gets them too)."""
    blocks = {"num_gpu_blocks_override": args.kv_blocks} if args.kv_blocks else {}
    if args.standin:
        return {**STANDIN_ENGINE_ARGS, **blocks}
    if args.gpu:
        share = round(0.85 / servers, 2)
        cache = int(args.kv_cache_gib * 2**30)
        return {
            **args.gpu_engine_args,
            "gpu_memory_utilization": share,
            "kv_cache_memory_bytes": cache,
            **blocks,
        }
    from app.engine.cpu_defaults import CpuHost, cpu_engine_defaults

    path = PROJECT_ROOT / "configs" / "model_repository" / "smollm2" / "1" / "model.json"
    model = json.loads(path.read_text())
    base = {k: v for k, v in model.items() if k not in ("model", "served_model_name")}
    chosen, _ = cpu_engine_defaults(base, CpuHost.this())
    return chosen


def standin_env(args: argparse.Namespace) -> dict[str, str]:
    if not args.standin:
        return {}
    return {"STANDIN_PROFILE": args.standin, "STANDIN_SLOWDOWN": f"{args.standin_slowdown:g}"}


def start(
    args: argparse.Namespace, shape: str, names: list[str], log_dir: Path
) -> dict[str, Endpoint]:
    """A server per target, so that no target meets a prefix cache that another one warmed
    (every level's prompts are the same for each target): ours for each of ours' targets,
    `vllm serve` for `vllm`, ours from the base tree for `base-openai`."""
    spec = ServerSpec(
        args.models / shape,
        shape,
        engine_args(args, len(names)),
        args.processes,
        instances=args.instances,
        instance_kind="KIND_GPU" if args.gpu else "KIND_CPU",
        env=standin_env(args),
        parameters=dict(pair.split("=", 1) for pair in args.ours_parameters.split(",") if pair),
    )
    endpoints = {}
    for name in names:
        if name == "vllm":
            endpoints[name] = vllm(spec, log_dir)
        elif name == BASE_TARGET:
            endpoints[name] = ours(spec, log_dir, "base", args.base_tree.resolve())
        else:
            endpoints[name] = ours(spec, log_dir, name)
    for endpoint in endpoints.values():
        endpoint.server.start()
        time.sleep(5)  # engines starting at one moment can race for a torch.distributed port
    import asyncio

    for endpoint in endpoints.values():
        asyncio.run(endpoint.server.wait_ready(900))
    return endpoints


def run_shape(args: argparse.Namespace, shape: str, results: Path) -> None:
    targets = args.targets.split(",") + ([BASE_TARGET] if args.base_tree is not None else [])
    endpoints = start(args, shape, targets, args.out / "logs" / shape)
    try:
        for number in range(args.rounds):
            for name in args.workloads.split(","):
                run_round(args, shape, name, number, targets, endpoints, results)
        if args.profile:
            profile(args, shape, targets, endpoints, results)
    finally:
        for endpoint in endpoints.values():
            endpoint.server.stop()


def run_round(
    args: argparse.Namespace,
    shape: str,
    name: str,
    number: int,
    targets: list[str],
    endpoints: dict[str, Endpoint],
    results: Path,
) -> None:
    """Round `number` of workload `name` over the targets, their order turned by the round."""
    shift = number % len(targets)
    for target in targets[shift:] + targets[:shift]:
        folder = args.out / "raw" / shape / f"{name}-{target}-r{number}"
        scale = args.levels.get(shape, {}).get(name)
        level = run_level(args, shape, name, target, endpoints[target], folder, number, scale=scale)
        if level is not None:
            record = {"shape": shape, "workload": name, "target": target, "round": number}
            write(results, {**record, **level})


def profile(
    args: argparse.Namespace,
    shape: str,
    targets: list[str],
    endpoints: dict[str, Endpoint],
    results: Path,
) -> None:
    """One more level (`--profile-workload`) of each OpenAI target with py-spy records of its
    server."""
    name = args.profile_workload
    for target in ("ours-openai", "vllm", BASE_TARGET):
        if target in targets:
            folder = args.out / "raw" / shape / f"profile-{target}"
            records = args.out / "profiles" / f"{shape}-{target}"
            endpoint = endpoints[target]
            level = run_level(args, shape, name, target, endpoint, folder, args.rounds, records)
            record = {"shape": shape, "workload": name, "target": target}
            write(results, {**record, "round": "profile", **(level or {})})


def write(path: Path, record: dict[str, Any]) -> None:
    shown = {k: v for k, v in record.items() if k not in ("server_cpu_s", "log_tail")}
    print(json.dumps(shown), flush=True)
    with path.open("a") as file:
        file.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = args.out / "results.jsonl"
    begun, code = time.time(), 1
    try:
        if args.gpu:
            from bench.gpu.mkmodels import ensure_shapes

            ensure_shapes(args.models, args.shapes, args.models / "smollm2")
        for shape in args.shapes:
            run_shape(args, shape, results)
        code = report(args, results)
    finally:
        stop_all()
        done = {"exit": code, "seconds": round(time.time() - begun), "argv": sys.argv[1:]}
        (args.out / "done.json").write_text(json.dumps(done) + "\n")
    return code


def report(args: argparse.Namespace, results: Path) -> int:
    """table.md from the results; 0 when every level ran without a failed request."""
    records = workload_report.load(results) if results.exists() else []
    records = [r for r in records if r.get("round") != "profile"]
    table = workload_report.render(
        records, args.scale if args.standin else "gpu" if args.gpu else "cpu"
    )
    (args.out / "table.md").write_text(table)
    print(table)
    return 0 if all(r.get("failed", 0) == 0 and "failed_level" not in r for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
