"""The GPU benchmark of our server: every target on every model shape; each level driven by K
load-generator processes started on a common barrier (so the client is never the limit),
their samples merged. `make bench` on a GPU host runs it on the default model.

    python bench/gpu/run.py --models .cache/models --out OUT [--shapes tiny,1b]
                            [--targets engine,vllm1,vllm4,ours4] [--together --rounds 2 --profile]

Shapes: folders of --models; `tiny` and `1b` (random weights, SmolLM2's tokenizer) are made
there by mkmodels.py from --like (default: --models/smollm2) when missing.

Targets: `engine` (AsyncLLM in the load generator's process), `vllmN` (`vllm serve` with N
API processes), `oursN` (`python -m app` with FRONTEND_PROCESSES=N), `oursNm` (the same with
the backend's `vllm:` metrics on, REPORT_CUSTOM_METRICS, as `vllm serve` always records
its own), `oursNg` (the same driven over Triton's gRPC ModelStreamInfer); by default engine,
vllm1, vllmN, oursN and oursNg with N our default process count on this host. Writes results.jsonl
(with the server CPU per process and the client CPU of each level) and table.md under --out.

--together starts every server of a shape and the in-process engine at once, each server on
its own port, each with an equal share of GPU memory, and measures them in turn for
--rounds rounds (the order rotated each round, the engine's load generator kept between
rounds): the ratios are then paired in time, not taken minutes apart. --profile then adds a
level at the highest C for each server and one more engine round (every level: give it only
the highest) with py-spy records of their two busiest processes (profiles/ under --out)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from bench.gpu.engine import EngineSession, engine_argv
from bench.gpu.levels import run_interleaved, run_level
from bench.gpu.loadgen import rotated
from bench.gpu.mkmodels import ensure_shapes
from bench.gpu.probes import record_profiles
from bench.gpu.servers import ENGINE_ARGS, Server, start_server, stop, wait_ready
from bench.gpu.table import load, render

TOKENS = 128
LEVELS = "1:16:1,64:4:4,256:4:8"
"""C:requests per client:load-generator processes, for each level."""
TOGETHER_KV_CACHE_BYTES = 4 * 2**30
"""The KV cache of each target started together (kv_cache_memory_bytes): its GPU memory share
alone does not make their caches equal, as vLLM's memory profile counts what the engines
starting beside it take meanwhile (on the H100, 14k to 590k tokens by launch order). 4 GiB
holds C = 256 of these requests many times over on both shapes."""
LAUNCH_GAP = 5.0
"""Seconds between two launches of servers started together (and the engine): engines
starting at one moment can race for one free port of torch.distributed (EADDRINUSE, once on
the H100)."""


def parse_levels(text: str) -> list[tuple[int, int, int]]:
    levels: list[tuple[int, int, int]] = []
    for level in text.split(","):
        parts = [int(part) for part in level.split(":")]
        if len(parts) != 3 or parts[0] % parts[2]:
            raise SystemExit(f"--levels {text!r}: each level is C:R:K with K dividing C")
        levels.append((parts[0], parts[1], parts[2]))
    return levels


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add = parser.add_argument
    add("--models", type=Path, required=True)
    add("--out", type=Path, required=True)
    add("--shapes", default="tiny,1b")
    add("--like", type=Path, help="what tiny and 1b are made like (default: --models/smollm2)")
    add(
        "--levels",
        default=LEVELS,
        help=f"C:requests per client:client processes,... (default: {LEVELS})",
    )
    add("--tokens", type=int, default=TOKENS, help=f"new tokens a request (default: {TOKENS})")
    add(
        "--processes",
        type=int,
        default=None,
        help="N of the default targets (default: ours on this host)",
    )
    add("--targets", default=None, help="default: engine,vllm1,vllmN,oursN,oursNg")
    add(
        "--together",
        action="store_true",
        help="every server of a shape up at once, measured in turn",
    )
    add("--rounds", type=int, default=1, help="rounds over the targets (with --together)")
    add("--profile", action="store_true", help="py-spy records at the highest C (with --together)")
    add(
        "--interleave-c1",
        action="store_true",
        help="with --together: C = 1 as one load generator sending each request "
        "to every server in turn",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    count = args.processes or default_processes()
    targets = (args.targets or f"engine,vllm1,vllm{count},ours{count},ours{count}g").split(",")
    levels = parse_levels(args.levels)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # only read by the CPU build (a smoke run)
    args.out.mkdir(parents=True, exist_ok=True)
    ensure_shapes(args.models, args.shapes.split(","), args.like or args.models / "smollm2")
    run = Run(args.models, args.out, args.models / "raw", levels, args.tokens)
    run.raw_dir.mkdir(exist_ok=True)
    for shape in args.shapes.split(","):
        if args.together:
            run.together(shape, targets, args.rounds, args.profile, args.interleave_c1)
        else:
            run.one_by_one(shape, targets)
    table = render(load(run.results))
    (args.out / "table.md").write_text(table)
    print(table)


@dataclass
class Run:
    """One GPU run: where the models and results are, the levels and the engine arguments."""

    models: Path
    out: Path
    raw_dir: Path
    levels: list[tuple[int, int, int]]
    tokens: int

    @property
    def results(self) -> Path:
        return self.out / "results.jsonl"

    def one_by_one(self, shape: str, targets: list[str]) -> None:
        """Each target started, measured at every level and stopped before the next."""
        for target in targets:
            if target == "engine":
                self.engine_once(shape)
                continue
            server = start_server(target, self.models, shape, self.out / f"{shape}-{target}.log")
            try:
                started = round(wait_ready(server.ready, server.process, server.launched), 1)
                self.measure(shape, server, {"start_s": started})
            except Exception as exc:  # noqa: BLE001 - record the failure, go on with the next target
                write(self.results, {"shape": shape, "target": target, "failed": repr(exc)})
            finally:
                stop(server.process)

    def together(
        self, shape: str, targets: list[str], rounds: int, profile: bool, interleave: bool = False
    ) -> None:
        """Every server and the in-process engine up at once (each an equal share of GPU
        memory and the same KV cache), then `rounds` rounds over the targets, the order
        rotated each round; with `interleave`, the servers' C = 1 level runs first in each
        round, interleaved."""
        names = [t for t in targets if t != "engine"]
        share = round(0.85 / (len(targets)), 2)
        args = {
            **ENGINE_ARGS,
            "gpu_memory_utilization": share,
            "kv_cache_memory_bytes": TOGETHER_KV_CACHE_BYTES,
        }
        servers, engine = self.start_all(shape, names, args, with_engine="engine" in targets)
        interleaved = interleave and len(servers) > 1 and any(c == 1 for c, _, _ in self.levels)
        try:
            for number in range(rounds):
                if interleaved:
                    self.measure_interleaved(shape, servers, number)
                for target in rotated(targets, number):
                    if target == "engine" and engine is not None:
                        self.engine_round(shape, engine, f"r{number}", {"round": number})
                    elif target in servers:
                        self.measure(shape, servers[target], {"round": number}, skip_c1=interleaved)
            if profile:
                if engine is not None:
                    self.profile_engine(shape, engine)
                for target, server in servers.items():
                    self.measure(
                        shape,
                        server,
                        {"round": "profile"},
                        self.out / "profiles" / f"{shape}-{target}",
                    )
        finally:
            if engine is not None:
                engine.stop()
            for server in servers.values():
                stop(server.process)

    def launch_engine(self, shape: str, engine_args: dict[str, Any]) -> EngineSession:
        raw = self.raw_dir / f"{shape}-engine"
        for stale in raw.parent.glob(f"{raw.name}.*"):
            stale.unlink()
        argv = engine_argv(self.models, shape, raw, self.levels, self.tokens, engine_args)
        return EngineSession.start(argv, raw, self.out / f"{shape}-engine.log")

    def wait_engine(self, shape: str, engine: EngineSession) -> EngineSession | None:
        """The launched engine once it is up (its start time written), or None."""
        try:
            write(
                self.results,
                {"shape": shape, "target": "engine", "start_s": round(engine.wait_ready(), 1)},
            )
        except RuntimeError as exc:
            write(self.results, {"shape": shape, "target": "engine", "failed": repr(exc)})
            engine.stop()
            return None
        return engine

    def start_all(
        self, shape: str, names: list[str], engine_args: dict[str, Any], with_engine: bool
    ) -> tuple[dict[str, Server], EngineSession | None]:
        """The first server alone (it fills the compile cache), then the others and (with
        `with_engine`) the in-process engine at once."""
        started = self.wait_servers(
            shape, self.launch_servers(shape, names, names[:1], engine_args)
        )
        pending = self.launch_servers(shape, names, names[1:], engine_args)
        if with_engine and pending:
            time.sleep(LAUNCH_GAP)
        engine = self.launch_engine(shape, engine_args) if with_engine else None
        started.update(self.wait_servers(shape, pending))
        return started, self.wait_engine(shape, engine) if engine is not None else None

    def launch_servers(
        self, shape: str, names: list[str], batch: list[str], engine_args: dict[str, Any]
    ) -> dict[str, Server]:
        """`batch` of the servers `names`, each on its own port, launched `LAUNCH_GAP` apart
        (not waited for)."""
        launched: dict[str, Server] = {}
        for target in batch:
            if launched:
                time.sleep(LAUNCH_GAP)
            launched[target] = start_server(
                target,
                self.models,
                shape,
                self.out / f"{shape}-{target}.log",
                8000 + 10 * names.index(target),
                engine_args,
            )
        return launched

    def wait_servers(self, shape: str, pending: dict[str, Server]) -> dict[str, Server]:
        """The launched servers that came up (their start times written); the others stopped."""
        started: dict[str, Server] = {}
        for target, server in pending.items():
            try:
                started_s = round(wait_ready(server.ready, server.process, server.launched), 1)
                write(self.results, {"shape": shape, "target": target, "start_s": started_s})
                started[target] = server
            except Exception as exc:  # noqa: BLE001 - record the failure, go on with the others
                write(self.results, {"shape": shape, "target": target, "failed": repr(exc)})
                stop(server.process)
        return started

    def measure(
        self,
        shape: str,
        server: Server,
        extra: dict[str, Any],
        profile: Path | None = None,
        skip_c1: bool = False,
    ) -> None:
        record = {"shape": shape, "target": server.target, **extra}
        for c, requests, clients in self.levels:
            if (profile is not None and c != max(level[0] for level in self.levels)) or (
                skip_c1 and c == 1
            ):
                continue
            requests = (
                requests * 2 if profile is not None else requests
            )  # the record outlasts the level's start
            level = run_level(
                server, shape, c, requests, clients, self.raw_dir, self.tokens, profile
            )
            write(self.results, {**record, **level})

    def measure_interleaved(self, shape: str, servers: dict[str, Server], number: int) -> None:
        """Round `number`'s C = 1 level of every server, one load generator taking them in turn."""
        requests = next(r for c, r, _ in self.levels if c == 1)
        order = rotated(list(servers), number)
        levels = run_interleaved(
            [servers[t] for t in order], shape, requests, self.raw_dir, self.tokens
        )
        for target in order:
            write(
                self.results, {"shape": shape, "target": target, "round": number, **levels[target]}
            )

    def engine_once(self, shape: str) -> None:
        """The in-process engine started, measured at every level and stopped."""
        engine = self.wait_engine(shape, self.launch_engine(shape, ENGINE_ARGS))
        if engine is not None:
            try:
                self.engine_round(shape, engine, "r0", {})
            finally:
                engine.stop()

    def profile_engine(self, shape: str, engine: EngineSession) -> None:
        """One more engine round (every level) with py-spy records of its two busiest
        processes (the core and the load generator), chosen once the first level runs."""
        out = self.out / "profiles" / f"{shape}-engine"
        recorder = threading.Thread(
            target=lambda: [p.wait() for p in record_profiles(engine.process.pid, out, 3.0)]
        )
        recorder.start()
        self.engine_round(shape, engine, "profile", {"round": "profile"})
        recorder.join()

    def engine_round(
        self, shape: str, engine: EngineSession, tag: str, extra: dict[str, Any]
    ) -> None:
        for level in engine.round(tag):
            write(self.results, {"shape": shape, "target": "engine", **extra, **level})


def default_processes() -> int:
    """FRONTEND_PROCESSES as our server would choose it here (at least 2, to compare)."""
    from app.settings import Settings

    return max(Settings().frontend_process_count(), 2)


def write(path: Path, record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)
    with path.open("a") as file:
        file.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
