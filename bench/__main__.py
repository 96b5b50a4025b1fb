"""`python -m bench`: the same streaming workload against engine, ours (HTTP/SSE), ours-grpc
(Triton's gRPC stream) and vllm-openai in one run, then the engine-free micro-benchmark of our
HTTP/SSE and gRPC layers. `make bench` runs the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.engine.engine_args import vllm_engine_args
from app.paths import PROJECT_ROOT
from app.repository.layout import ModelSpec, load_repository
from bench import report
from bench.grpc_target import OursGrpcTarget
from bench.machine import machine_info
from bench.micro import MicroConfig, MicroStats, run_micro
from bench.paired import run_paired
from bench.progress import Progress
from bench.servers import descendants, stop_all, stop_new_descendants
from bench.stats import LevelStats, protocol_ratios, ratios, summarize
from bench.targets import (
    EngineTarget,
    OursOpenAITarget,
    OursTarget,
    VllmOpenAITarget,
    ours_server,
    vllm_openai_server,
)
from bench.workload import Workload, prompts, run_level

TARGETS = ("engine", "ours", "ours-grpc", "ours-openai", "vllm-openai", "micro", "micro-grpc")
MICRO_PROTOCOLS = {"micro": "sse", "micro-grpc": "grpc"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    add = parser.add_argument
    add(
        "--targets",
        nargs="+",
        choices=TARGETS,
        default=list(TARGETS),
        help="what to run, in this order (default: all)",
    )
    add(
        "-c",
        "--concurrency",
        nargs="+",
        type=int,
        default=[1, 16, 64],
        help="concurrent clients per level (default: 1 16 64)",
    )
    add("-r", "--requests", type=int, default=8, help="requests per client (default: 8)")
    add(
        "--min-requests",
        type=int,
        default=32,
        help="at least this many requests per level: R is raised at low C (default: 32)",
    )
    add("-n", "--max-tokens", type=int, default=64, help="new tokens per request (default: 64)")
    add("--no-warmup", dest="warmup", action="store_false", help="skip the warm-up round")
    add("--no-pair", dest="pair", action="store_false", help="ours, ours-grpc: a server each")
    add("--model-repository", type=Path, default=PROJECT_ROOT / "configs" / "model_repository")
    add("--model", help="model of the repository (default: its first)")
    add("--ours-url", help="use this running server for `ours` instead of starting one")
    add("--ours-grpc-url", help="use this running server's gRPC port (host:port) for `ours-grpc`")
    add("--vllm-url", help="use this running vLLM server for `vllm-openai`")
    add("--kvcache-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE (default: 2)")
    add(
        "--micro-concurrency",
        nargs="+",
        type=int,
        default=[1, 256],
        help="micro-benchmark levels (default: 1 256)",
    )
    add(
        "--micro-requests",
        type=int,
        default=1024,
        help="micro-benchmark requests per level (default: 1024)",
    )
    add(
        "--out",
        type=Path,
        default=PROJECT_ROOT / "bench" / "results",
        help="folder of the JSON, the plot and the server logs",
    )
    add("--no-plot", dest="plot", action="store_false", help="write no PNG")
    add("--quiet", action="store_true", help="no progress lines")
    return parser.parse_args(argv)


@dataclass
class Outcome:
    results: list[LevelStats] = field(default_factory=list)
    micro: list[MicroStats] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)


def model_spec(args: argparse.Namespace) -> ModelSpec:
    specs = load_repository(
        args.model_repository, [args.model] if args.model else None, vllm_engine_args
    )
    return specs[0]


def quiet_engine_logs(log_dir: Path) -> None:
    """Send the in-process engine's vLLM logs (and its engine core's) to a file, not stdout."""
    log_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "formatter": "plain",
                "filename": str(log_dir / "engine.log"),
            }
        },
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }
    path = log_dir / "engine-logging.json"
    path.write_text(json.dumps(config))
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(path)


def make_target(name: str, args: argparse.Namespace, spec: ModelSpec, log_dir: Path) -> Any:
    connections = max(args.concurrency)
    served = served_name(spec)
    if name == "engine":
        return EngineTarget(spec, args.kvcache_gib, log_dir / "engine.log")
    if name == "ours":
        server = (
            None
            if args.ours_url
            else ours_server(spec, args.model_repository, PROJECT_ROOT, log_dir, args.kvcache_gib)
        )
        return OursTarget(spec.name, args.ours_url, server, connections)
    if name == "ours-grpc":
        return grpc_target(args, spec, log_dir)
    if name == "ours-openai":
        server = (
            None
            if args.ours_url
            else ours_server(
                spec, args.model_repository, PROJECT_ROOT, log_dir, args.kvcache_gib, name
            )
        )
        return OursOpenAITarget(spec.name, args.ours_url, server, connections)
    server = (
        None if args.vllm_url else vllm_openai_server(spec, PROJECT_ROOT, log_dir, args.kvcache_gib)
    )
    return VllmOpenAITarget(served, args.vllm_url, server, connections)


def grpc_target(args: argparse.Namespace, spec: ModelSpec, log_dir: Path) -> OursGrpcTarget:
    """`python -m app` started as for `ours`, driven through its gRPC port."""
    if args.ours_grpc_url:
        return OursGrpcTarget(spec.name, args.ours_grpc_url, None)
    server = ours_server(
        spec, args.model_repository, PROJECT_ROOT, log_dir, args.kvcache_gib, "ours-grpc"
    )
    assert server.grpc_url is not None
    return OursGrpcTarget(spec.name, server.grpc_url, server)


def served_name(spec: ModelSpec) -> str:
    name = spec.engine_args.get("served_model_name") or spec.engine_args["model"]
    return name[0] if isinstance(name, list) else str(name)


async def run_target(
    name: str,
    args: argparse.Namespace,
    spec: ModelSpec,
    workload: Workload,
    progress: Progress,
    log_dir: Path,
) -> list[LevelStats]:
    """Start one target, warm it up, run every level, stop it."""
    progress.note(f"{name}: starting")
    started = time.perf_counter()
    results = []
    async with make_target(name, args, spec, log_dir) as target:
        progress.note(f"{name}: ready after {time.perf_counter() - started:.0f} s")
        source = prompts()
        if workload.warmup:
            await run_level(
                target.stream,
                max(workload.concurrency),
                1,
                workload.max_tokens,
                prompts("warm-up "),
            )
        for concurrency in workload.concurrency:
            per_client = workload.requests_per_client(concurrency)
            on_request = progress.level(name, concurrency, per_client * concurrency)
            run = await run_level(
                target.stream, concurrency, per_client, workload.max_tokens, source, on_request
            )
            results.append(summarize(name, run))
        progress.note(f"{name}: stopping")
    return results


async def run_all(
    args: argparse.Namespace, spec: ModelSpec, progress: Progress, log_dir: Path
) -> Outcome:
    workload = Workload(
        tuple(args.concurrency), args.requests, args.min_requests, args.max_tokens, args.warmup
    )
    outcome = Outcome()
    paired = paired_protocols(args)
    for name in args.targets:
        if paired and name == "ours-grpc":
            continue
        try:
            if paired and name == "ours":
                urls = (args.ours_url, args.ours_grpc_url) if args.ours_url else None
                outcome.results += await run_paired(
                    spec, args.model_repository, PROJECT_ROOT, log_dir, args.kvcache_gib,
                    workload, progress, urls,
                )
            elif name in MICRO_PROTOCOLS:
                config = MicroConfig(
                    tuple(args.micro_concurrency), args.micro_requests, args.max_tokens
                )
                progress.note(f"{name}: our app with an engine double that never waits")
                outcome.micro += await run_micro(
                    config,
                    spec.name,
                    args.model_repository,
                    PROJECT_ROOT,
                    log_dir,
                    progress.level,
                    MICRO_PROTOCOLS[name],
                )
            else:
                outcome.results += await run_target(name, args, spec, workload, progress, log_dir)
        except Exception as exc:  # one broken target must not hide the others' figures
            outcome.failures[name] = f"{type(exc).__name__}: {exc}"
            progress.note(f"{name}: FAILED: {exc}")
    return outcome


def paired_protocols(args: argparse.Namespace) -> bool:
    """ours and ours-grpc run as a pair on one server (both started, or both URLs given)."""
    both = {"ours", "ours-grpc"} <= set(args.targets)
    return both and args.pair and bool(args.ours_url) == bool(args.ours_grpc_url)


def render(outcome: Outcome, found: list, goals: list, grpc: list, found_openai: list) -> str:
    parts = []
    if outcome.results:
        parts += ["Streaming workload", report.results_table(outcome.results)]
    if found:
        parts += ["Ratios", report.ratios_table(found)]
    if grpc:
        parts += ["gRPC stream vs SSE", report.grpc_table(grpc)]
    if found_openai:
        parts += ["Ratios on /v1/completions", report.openai_ratios_table(found_openai)]
    if outcome.micro:
        parts += [
            "Micro-benchmark (HTTP/SSE and gRPC layers, engine double)",
            report.micro_table(outcome.micro),
        ]
    if goals:
        parts += ["Targets", report.checks_text(goals)]
    for name, message in outcome.failures.items():
        parts.append(f"FAILED {name}: {message}")
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.model_repository = args.model_repository.resolve()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = args.out / "logs" / stamp
    if "engine" in args.targets:
        quiet_engine_logs(log_dir)
    spec = model_spec(args)
    progress = Progress(quiet=args.quiet)
    progress.note(f"model {spec.name}, logs in {log_dir}")
    before = descendants()
    try:
        outcome = run_async(run_all(args, spec, progress, log_dir))
    except KeyboardInterrupt:
        progress.note("interrupted")
        return 130
    finally:
        stop_all()
        stop_new_descendants(before)
    found = ratios(outcome.results)
    grpc = protocol_ratios(outcome.results)
    found_openai = [r for r in ratios(outcome.results, "ours-openai") if r.versus == "vllm-openai"]
    goals = report.checks(found, outcome.micro, grpc) + report.openai_checks(found_openai)
    print(render(outcome, found, goals, grpc, found_openai))
    payload = {
        "started": stamp,
        "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_info(),
        "model": {"name": spec.name, "engine_args": spec.engine_args},
        "workload": {k: v for k, v in vars(args).items() if not isinstance(v, Path)},
        "results": [s.to_dict() for s in outcome.results],
        "ratios": [r.to_dict() for r in found],
        "grpc_vs_sse": [r.to_dict() for r in grpc],
        "ratios_openai": [r.to_dict() for r in found_openai],
        "micro": [m.to_dict() for m in outcome.micro],
        "targets": goals,
        "failures": outcome.failures,
    }
    json_path = args.out / f"bench-{stamp}.json"
    report.write_json(json_path, payload)
    print(f"\nJSON: {json_path}")
    if args.plot and outcome.results:
        png = args.out / f"bench-{stamp}.png"
        machine = payload["machine"]
        report.plot(
            outcome.results,
            png,
            f"{spec.name}, {args.max_tokens} new tokens/request — "
            f"{machine['cpu']} ({machine['cores']} cores), {stamp}",
        )
        print(f"plot: {png}")
    errors = sum(s.errors for s in outcome.results) + sum(m.errors for m in outcome.micro)
    return 1 if outcome.failures or errors else 0


def run_async(coroutine: Coroutine[Any, Any, Outcome]) -> Outcome:
    """Run on uvloop, as both servers do (uvicorn picks it), so the in-process engine and the
    HTTP client get the same event loop; asyncio's own where uvloop is missing."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the event loop's runner then cancels the run and every target stops."""
    signal.raise_signal(signal.SIGINT)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, interrupt)
    sys.exit(main())
