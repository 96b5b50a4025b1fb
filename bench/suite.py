"""The targets of one `python -m bench` run, each in turn: started (or reached at a given URL),
driven through every level of the streaming workload and stopped; `ours` and `ours-grpc` as a
pair on one server; the micro-benchmarks and the burst and soak. Their figures, and the
failure of any target, gathered in an `Outcome`."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.paths import PROJECT_ROOT
from app.repository.layout import ModelSpec
from bench.grpc_target import OursGrpcTarget
from bench.micro import MicroConfig, MicroStats, run_micro
from bench.paired import run_paired
from bench.progress import Progress
from bench.reliability import TARGETS as RELIABILITY_TARGETS
from bench.reliability import run_reliability
from bench.stats import LevelStats, summarize
from bench.targets import (
    EngineTarget,
    OursOpenAITarget,
    OursTarget,
    VllmOpenAITarget,
    ours_server,
    vllm_openai_server,
)
from bench.workload import Workload, prompts, run_level

MICRO_PROTOCOLS = {"micro": "sse", "micro-grpc": "grpc"}


@dataclass
class Outcome:
    results: list[LevelStats] = field(default_factory=list)
    micro: list[MicroStats] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    reliability: dict[str, tuple[list[str], dict[str, Any]]] = field(default_factory=dict)
    """burst and soak: the report's lines and the figures, by target."""


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
            await run_one(name, paired, args, spec, workload, progress, log_dir, outcome)
        except Exception as exc:  # noqa: BLE001 - one broken target must not hide the others' figures
            outcome.failures[name] = f"{type(exc).__name__}: {exc}"
            progress.note(f"{name}: FAILED: {exc}")
    return outcome


async def run_one(
    name: str,
    paired: bool,
    args: argparse.Namespace,
    spec: ModelSpec,
    workload: Workload,
    progress: Progress,
    log_dir: Path,
    outcome: Outcome,
) -> None:
    """One target of the command line (with `paired`, `ours` is the pair), its figures added
    to `outcome`."""
    if paired and name == "ours":
        urls = (args.ours_url, args.ours_grpc_url) if args.ours_url else None
        outcome.results += await run_paired(
            spec,
            args.model_repository,
            PROJECT_ROOT,
            log_dir,
            args.kvcache_gib,
            workload,
            progress,
            urls,
        )
    elif name in MICRO_PROTOCOLS:
        config = MicroConfig(tuple(args.micro_concurrency), args.micro_requests, args.max_tokens)
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
    elif name in RELIABILITY_TARGETS:
        outcome.reliability[name] = await run_reliability(
            name,
            spec,
            args.model_repository,
            PROJECT_ROOT,
            log_dir,
            args.kvcache_gib,
            progress,
            vars(args),
        )
    else:
        outcome.results += await run_target(name, args, spec, workload, progress, log_dir)


def paired_protocols(args: argparse.Namespace) -> bool:
    """ours and ours-grpc run as a pair on one server (both started, or both URLs given)."""
    both = {"ours", "ours-grpc"} <= set(args.targets)
    return both and args.pair and bool(args.ours_url) == bool(args.ours_grpc_url)
