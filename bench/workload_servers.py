"""The servers the realistic workloads run against, all up together: ours (`python -m app`
with N frontend processes, HTTP and gRPC, from this tree or from a baseline tree) and
`vllm serve` with N API processes, each with the same engine arguments and an equal share of
the machine."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.paths import PROJECT_ROOT
from bench.servers import ServerProcess, free_ports, server_env
from bench.targets import vllm_cli_flags

VLLM_CLI = "vllm.entrypoints.cli.main"
"""vLLM's CLI (`vllm serve`; with the CPU build, `make setup` makes its version resolvable)."""


@dataclass(frozen=True)
class ServerSpec:
    """What every server of a run shares: the model, its engine arguments, the process count."""

    model_dir: Path
    name: str
    engine_args: dict[str, Any]
    processes: int
    kvcache_gib: int = 2
    """VLLM_CPU_KVCACHE_SPACE (read by the CPU build only)."""


@dataclass
class Endpoint:
    """A started server: its process and where each protocol answers."""

    server: ServerProcess
    http: str
    grpc: str | None = None
    metrics: str = ""
    """The URL of its Prometheus metrics (the `vllm:` series)."""


def repository(root: Path, spec: ServerSpec) -> Path:
    """A model repository with one model: `spec`'s engine arguments in model.json (no chat
    template for raw prompts, as vLLM's server has none for completions), reporting the
    `vllm:` metrics as `vllm serve` always does."""
    version = root / spec.name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (root / spec.name / "config.pbtxt").write_text(
        'backend: "vllm"\ninstance_group [ { count: 1 kind: KIND_MODEL } ]\n'
        'parameters: { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }\n'
    )
    model = {"model": str(spec.model_dir), "served_model_name": spec.name, **spec.engine_args}
    (version / "model.json").write_text(json.dumps(model, indent=2))
    return root


def ours(
    spec: ServerSpec, log_dir: Path, name: str = "ours", tree: Path = PROJECT_ROOT
) -> Endpoint:
    """`python -m app` of `tree` with N frontend processes, on free local ports."""
    port, grpc_port, metrics_port = free_ports(3)
    repo = repository(log_dir / f"repository-{name}", spec)
    argv = [
        sys.executable,
        "-m",
        "app",
        "--model-repository",
        str(repo),
        "--models",
        spec.name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
        "--metrics-port",
        str(metrics_port),
    ]
    env = server_env(
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE=str(spec.kvcache_gib),
        FRONTEND_PROCESSES=str(spec.processes),
        PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
    )
    server = ServerProcess(
        name,
        argv,
        f"http://127.0.0.1:{port}",
        "/v2/health/ready",
        log_dir / f"{name}.log",
        env,
        tree,
    )
    return Endpoint(
        server,
        server.base_url,
        f"127.0.0.1:{grpc_port}",
        f"http://127.0.0.1:{metrics_port}/metrics",
    )


def vllm(spec: ServerSpec, log_dir: Path) -> Endpoint:
    """`vllm serve` with N API processes and the same engine arguments."""
    (port,) = free_ports(1)
    flags = vllm_cli_flags({k: v for k, v in spec.engine_args.items() if k != "model"})
    argv = [
        sys.executable,
        "-m",
        VLLM_CLI,
        "serve",
        str(spec.model_dir),
        "--served-model-name",
        spec.name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--api-server-count",
        str(spec.processes),
        *flags,
    ]
    env = server_env(
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE=str(spec.kvcache_gib),
        PYTHONPATH=os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    server = ServerProcess(
        "vllm", argv, f"http://127.0.0.1:{port}", "/health", log_dir / "vllm.log", env, PROJECT_ROOT
    )
    return Endpoint(server, server.base_url, metrics=f"{server.base_url}/metrics")
