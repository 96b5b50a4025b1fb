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
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from app.engine.engine_args import vllm_engine_args
from app.paths import PROJECT_ROOT
from app.repository.layout import ModelSpec, load_repository
from bench import report
from bench.machine import machine_info
from bench.progress import Progress
from bench.reliability import TARGETS as RELIABILITY_TARGETS
from bench.servers import descendants, stop_all, stop_new_descendants
from bench.stats import Ratio, protocol_ratios, ratios
from bench.suite import Outcome, run_all

TARGETS = (
    "engine",
    "ours",
    "ours-grpc",
    "ours-openai",
    "vllm-openai",
    "micro",
    "micro-grpc",
    *RELIABILITY_TARGETS,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    add = parser.add_argument
    add_workload_options(add)
    add_server_options(add)
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
    add_reliability_options(add)
    add("--no-plot", dest="plot", action="store_false", help="write no PNG")
    add("--quiet", action="store_true", help="no progress lines")
    return parser.parse_args(argv)


def add_workload_options(add: Callable[..., Any]) -> None:
    """What runs, and the streaming workload's levels."""
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


def add_server_options(add: Callable[..., Any]) -> None:
    """The model, and the servers: started here, or running ones."""
    add("--model-repository", type=Path, default=PROJECT_ROOT / "configs" / "model_repository")
    add("--model", help="model of the repository (default: its first)")
    add("--ours-url", help="use this running server for `ours` instead of starting one")
    add("--ours-grpc-url", help="use this running server's gRPC port (host:port) for `ours-grpc`")
    add("--vllm-url", help="use this running vLLM server for `vllm-openai`")
    add("--kvcache-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE (default: 2)")


def add_reliability_options(add: Callable[..., Any]) -> None:
    """The sizes of the burst, the soak and the routing runs."""
    add(
        "--burst-requests",
        type=int,
        default=256,
        help="burst: streams sent at once (default: 256)",
    )
    add(
        "--burst-max-tokens",
        type=int,
        default=16,
        help="burst: new tokens per stream (default: 16)",
    )
    add("--soak-minutes", type=float, default=30, help="soak: how long (default: 30)")
    add(
        "--soak-window-minutes",
        type=float,
        default=10,
        help="soak: one report line per window (default: 10)",
    )
    add("--routing-requests", type=int, default=64, help="routing: streams per run (default: 64)")
    add("--routing-concurrency", type=int, default=4, help="routing: at a time (default: 4)")
    add(
        "--routing-kv-blocks",
        type=int,
        default=48,
        help="routing: KV cache blocks of each engine (default: 48; 0: as configured)",
    )
    add("--routing-double", action="store_true", help="routing: the engine double (a smoke test)")


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


def render(
    outcome: Outcome,
    found: list[Ratio],
    goals: list[dict[str, Any]],
    grpc: list[Ratio],
    found_openai: list[Ratio],
) -> str:
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
    for name, (lines, _) in outcome.reliability.items():
        parts += [name.capitalize(), "\n".join(lines)]
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
    write_results(outcome, args, argv, spec, stamp)
    errors = sum(s.errors for s in outcome.results) + sum(m.errors for m in outcome.micro)
    return 1 if outcome.failures or errors else 0


def write_results(
    outcome: Outcome,
    args: argparse.Namespace,
    argv: list[str] | None,
    spec: ModelSpec,
    stamp: str,
) -> None:
    """The tables and checks printed, the JSON written (and the plot, unless --no-plot)."""
    found = ratios(outcome.results)
    grpc = protocol_ratios(outcome.results)
    found_openai = [r for r in ratios(outcome.results, "ours-openai") if r.versus == "vllm-openai"]
    goals = report.checks(found, outcome.micro, grpc) + report.openai_checks(found_openai)
    print(render(outcome, found, goals, grpc, found_openai))
    payload: dict[str, Any] = {
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
        "reliability": {name: figures for name, (_, figures) in outcome.reliability.items()},
        "targets": goals,
        "failures": outcome.failures,
    }
    json_path = args.out / f"bench-{stamp}.json"
    report.write_json(json_path, payload)
    print(f"\nJSON: {json_path}")
    if args.plot and outcome.results:
        plot(outcome, args, spec, stamp, payload["machine"])


def plot(
    outcome: Outcome,
    args: argparse.Namespace,
    spec: ModelSpec,
    stamp: str,
    machine: dict[str, Any],
) -> None:
    png = args.out / f"bench-{stamp}.png"
    report.plot(
        outcome.results,
        png,
        f"{spec.name}, {args.max_tokens} new tokens/request — "
        f"{machine['cpu']} ({machine['cores']} cores), {stamp}",
    )
    print(f"plot: {png}")


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
