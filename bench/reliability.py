"""`make bench`'s targets that start our server themselves: `burst` (many streams at once:
completed, refused at the door, TTFT) and `soak` (mixed traffic for a long time: memory, open
files, latency drift and errors per window), each on the server as `make serve` starts it;
`routing` (prefix-aware against least-loaded routing between two CPU instances of the model,
bench/routing.py)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.repository.layout import ModelSpec
from bench.burst import burst, summarize
from bench.progress import Progress
from bench.routing import run_routing
from bench.soak import SoakConfig, soak, soak_lines
from bench.targets import ours_server
from bench.traffic import Servers, Traffic

TARGETS = ("burst", "soak", "routing")


async def run_reliability(
    name: str,
    spec: ModelSpec,
    repository: Path,
    root: Path,
    log_dir: Path,
    kvcache_gib: int,
    progress: Progress,
    options: dict[str, Any],
) -> tuple[list[str], dict[str, Any]]:
    """Start our server, run the burst or the soak on it, stop it (the routing target: its
    two servers): the report's lines and the figures for the JSON."""
    if name == "routing":
        return await run_routing(spec, repository, root, log_dir, kvcache_gib, progress, options)
    server = ours_server(spec, repository, root, log_dir, kvcache_gib, name)
    server.start()
    try:
        progress.note(f"{name}: ready after {await server.wait_ready():.0f} s")
        assert server.grpc_url is not None
        async with Traffic(Servers(server.base_url, server.grpc_url, spec.name)) as traffic:
            if name == "burst":
                report = summarize(
                    await burst(traffic, options["burst_requests"], options["burst_max_tokens"])
                )
                return report.lines(), asdict(report)
            config = SoakConfig(
                minutes=options["soak_minutes"], window_minutes=options["soak_window_minutes"]
            )
            rate, windows = await soak(traffic, server.pid, config, progress.note)
            return soak_lines(rate, windows), {"rate": rate, "windows": [w.row() for w in windows]}
    finally:
        server.stop()
