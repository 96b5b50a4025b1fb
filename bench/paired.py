"""`ours` and `ours-grpc` as a pair: one server started as `make serve` starts it (HTTP and
gRPC), and each level's requests sent in rounds that alternate between the two protocols
(A B, B A, ...), so that both meet the same machine. On a shared host whose load drifts
from minute to minute this compares the protocols, not the minutes they ran in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from app.repository.layout import ModelSpec
from bench.grpc_target import OursGrpcTarget
from bench.progress import Progress
from bench.stats import LevelStats, summarize
from bench.targets import OursTarget, ours_server
from bench.workload import LevelRun, Workload, prompts, run_level

ROUNDS = 4
"""Rounds per protocol and level (fewer when a client sends fewer requests)."""


def round_sizes(per_client: int, rounds: int = ROUNDS) -> list[int]:
    """Requests per client in each round: `per_client` split into at most `rounds` parts."""
    count = max(1, min(rounds, per_client))
    base, extra = divmod(per_client, count)
    return [base + (1 if index < extra else 0) for index in range(count)]


def merged(concurrency: int, runs: list[LevelRun]) -> LevelRun:
    """The rounds of one protocol as one level: their records, their summed wall time."""
    return LevelRun(
        concurrency, [r for run in runs for r in run.records], sum(run.seconds for run in runs)
    )


async def run_paired(
    spec: ModelSpec,
    repository: Path,
    root: Path,
    log_dir: Path,
    kvcache_gib: int,
    workload: Workload,
    progress: Progress,
    urls: tuple[str, str] | None = None,
) -> list[LevelStats]:
    """Both targets on one server (or on the running one at `urls`: HTTP base URL, gRPC
    host:port), every level in alternating rounds."""
    server = (
        None if urls else ours_server(spec, repository, root, log_dir, kvcache_gib, "ours+grpc")
    )
    http_url, grpc_url = urls or (None, server.grpc_url if server else None)
    assert grpc_url is not None
    sse = OursTarget(spec.name, http_url, server, max(workload.concurrency))
    rpc = OursGrpcTarget(spec.name, grpc_url, None)
    results = []
    progress.note("ours, ours-grpc: starting one server, levels in alternating rounds")
    async with sse, rpc:
        sources: dict[str, Iterator[str]] = {"ours": prompts("(1) "), "ours-grpc": prompts("(2) ")}
        if workload.warmup:
            for target, namespace in ((sse, "(1) warm-up "), (rpc, "(2) warm-up ")):
                await run_level(
                    target.stream,
                    max(workload.concurrency),
                    1,
                    workload.max_tokens,
                    prompts(namespace),
                )
        for concurrency in workload.concurrency:
            per_client = workload.requests_per_client(concurrency)
            runs: dict[str, list[LevelRun]] = {"ours": [], "ours-grpc": []}
            callbacks = {
                t.name: progress.level(t.name, concurrency, per_client * concurrency)
                for t in (sse, rpc)
            }
            for index, size in enumerate(round_sizes(per_client)):
                order = (sse, rpc) if index % 2 == 0 else (rpc, sse)
                for target in order:
                    runs[target.name].append(
                        await run_level(
                            target.stream,
                            concurrency,
                            size,
                            workload.max_tokens,
                            sources[target.name],
                            callbacks[target.name],
                        )
                    )
            results += [
                summarize(name, merged(concurrency, rounds)) for name, rounds in runs.items()
            ]
        progress.note("ours, ours-grpc: stopping")
    return results
