"""Engine-free micro-benchmark of our HTTP/SSE layer (and of the gRPC frontend): streamed
responses per second and server CPU per response.

The app runs under uvicorn (with its gRPC server in the same loop for `grpc`) in its own
process with `FastEngine`, which never waits; this process is the load generator. Server CPU
time (user + system, all threads) is read with psutil before and after each level, so the
figure is the server's own cost per event whatever the speed of the client.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.grpc_target import OursGrpcTarget
from bench.servers import ServerProcess, free_ports, server_env
from bench.targets import OursTarget
from bench.workload import LevelRun, RequestRecord, prompts, run_level


@dataclass(frozen=True, slots=True)
class MicroConfig:
    """Concurrency levels, requests per level and tokens (= SSE events) per request."""

    concurrency: tuple[int, ...] = (1, 256)
    requests: int = 1024
    max_tokens: int = 64

    def requests_per_client(self, concurrency: int) -> int:
        return max(1, -(-self.requests // concurrency))


@dataclass(frozen=True, slots=True)
class MicroStats:
    concurrency: int
    requests: int
    errors: int
    events: int
    seconds: float
    events_per_s: float
    server_cpu_s: float
    server_system_s: float
    server_us_per_event: float
    server_cpu_share: float
    client_us_per_event: float
    first_error: str | None = None
    protocol: str = "sse"
    """`sse`: one SSE event per token; `grpc`: one ModelStreamInfer response per token."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def micro_server(
    model: str, repository: Path, root: Path, log_dir: Path, grpc: bool = False
) -> ServerProcess:
    port, grpc_port = free_ports(2)
    argv = [
        sys.executable,
        "-m",
        "bench.micro_server",
        "--model-repository",
        str(repository),
        "--models",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *(["--grpc-port", str(grpc_port)] if grpc else []),
    ]
    name = "micro-grpc" if grpc else "micro"
    return ServerProcess(
        name,
        argv,
        f"http://127.0.0.1:{port}",
        "/v2/health/ready",
        log_dir / f"{name}.log",
        server_env(HF_HUB_OFFLINE="1"),
        root,
        grpc_url=f"127.0.0.1:{grpc_port}" if grpc else None,
    )


def cpu_seconds(process: psutil.Process) -> tuple[float, float]:
    """User + system CPU seconds of a process (all its threads), and system alone."""
    times = process.cpu_times()
    return times.user + times.system, times.system


def micro_stats(
    run: LevelRun, server_cpu: float, server_system: float, client_cpu: float, protocol: str = "sse"
) -> MicroStats:
    failed = [r for r in run.records if r.error is not None]
    events = sum(len(r.counts) for r in run.records)
    per_event = 1e6 / max(events, 1)
    return MicroStats(
        concurrency=run.concurrency,
        requests=len(run.records),
        errors=len(failed),
        events=events,
        seconds=round(run.seconds, 3),
        events_per_s=round(events / max(run.seconds, 1e-9), 1),
        server_cpu_s=round(server_cpu, 3),
        server_system_s=round(server_system, 3),
        server_us_per_event=round(server_cpu * per_event, 2),
        server_cpu_share=round(server_cpu / max(run.seconds, 1e-9), 3),
        client_us_per_event=round(client_cpu * per_event, 2),
        first_error=failed[0].error if failed else None,
        protocol=protocol,
    )


async def run_micro(
    config: MicroConfig,
    model: str,
    repository: Path,
    root: Path,
    log_dir: Path,
    progress: Callable[[str, int, int], Callable[[RequestRecord], None]],
    protocol: str = "sse",
) -> list[MicroStats]:
    """Start the app with `FastEngine`, warm it up, then measure each concurrency level."""
    target: OursTarget | OursGrpcTarget
    if protocol == "grpc":
        server = micro_server(model, repository, root, log_dir, grpc=True)
        assert server.grpc_url is not None
        target = OursGrpcTarget(model, server.grpc_url, server)
    else:
        server = micro_server(model, repository, root, log_dir)
        target = OursTarget(model, None, server, max(config.concurrency))
    label = "micro" if protocol == "sse" else f"micro-{protocol}"
    results = []
    async with target:
        source: Iterator[str] = prompts("micro ")
        await run_level(
            target.stream, min(8, max(config.concurrency)), 1, config.max_tokens, source
        )
        server_process, client_process = psutil.Process(server.pid), psutil.Process()
        for concurrency in config.concurrency:
            per_client = config.requests_per_client(concurrency)
            on_request = progress(label, concurrency, per_client * concurrency)
            server_before, client_before = cpu_seconds(server_process), cpu_seconds(client_process)
            run = await run_level(
                target.stream, concurrency, per_client, config.max_tokens, source, on_request
            )
            server_after, client_after = cpu_seconds(server_process), cpu_seconds(client_process)
            results.append(
                micro_stats(
                    run,
                    server_after[0] - server_before[0],
                    server_after[1] - server_before[1],
                    client_after[0] - client_before[0],
                    protocol,
                )
            )
    return results
