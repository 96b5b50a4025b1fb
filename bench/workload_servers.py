"""The servers the realistic workloads run against, all up together: ours (`python -m app`
with N frontend processes, HTTP and gRPC, from this tree or from a baseline tree) and
`vllm serve` with N API processes, each with the same engine arguments and an equal share of
the machine. With several engines (`instances`), ours has that many instances
(config.pbtxt's `instance_group`, routed as the target says) and `vllm serve` as many data
parallel ranks."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
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
    instances: int = 1
    """Engines a server: ours' instances, `vllm serve`'s data parallel size."""
    instance_kind: str = "KIND_MODEL"
    """Ours' instance group kind with several engines: KIND_GPU (one a GPU) or KIND_CPU."""
    env: dict[str, str] = field(default_factory=dict)
    """More environment for every server (the engine stand-in's profile)."""
    parameters: dict[str, str] = field(default_factory=dict)
    """More config.pbtxt parameters for ours (e.g. INSTANCE_ROUTING_HIT_TOKENS)."""


ROUTINGS = {
    "ours-openai": {},
    "ours-cache": {"INSTANCE_ROUTING": "cache_aware"},
    "ours-process": {"INSTANCE_ROUTING_LOAD_VIEW": "process"},
}
"""Ours' targets over `/v1` and how each routes between instances: by the engines' load (the
default), cache-aware, or by each frontend process's own counts (the earlier default)."""


@dataclass
class Endpoint:
    """A started server: its process and where each protocol answers."""

    server: ServerProcess
    http: str
    grpc: str | None = None
    metrics: str = ""
    """The URL of its Prometheus metrics (the `vllm:` series)."""


def repository(root: Path, spec: ServerSpec, routing: dict[str, str] | None = None) -> Path:
    """A model repository with one model: `spec`'s engine arguments in model.json (no chat
    template for raw prompts, as vLLM's server has none for completions), reporting the
    `vllm:` metrics as `vllm serve` always does; its instances routed by `routing` (config.pbtxt
    parameters)."""
    version = root / spec.name / "1"
    version.mkdir(parents=True, exist_ok=True)
    if spec.instances > 1 and spec.instance_kind == "KIND_GPU":
        group = "{ count: 1 kind: KIND_GPU }"  # one on each GPU the server sees
    else:
        kind = spec.instance_kind if spec.instances > 1 else "KIND_MODEL"
        group = f"{{ count: {spec.instances} kind: {kind} }}"
    parameters = {"REPORT_CUSTOM_METRICS": "true", **(routing or {})}
    (root / spec.name / "config.pbtxt").write_text(
        f'backend: "vllm"\ninstance_group [ {group} ]\n'
        + "".join(
            f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
            for key, value in parameters.items()
        )
    )
    model = {"model": str(spec.model_dir), "served_model_name": spec.name, **spec.engine_args}
    (version / "model.json").write_text(json.dumps(model, indent=2))
    return root


def ours(
    spec: ServerSpec, log_dir: Path, name: str = "ours", tree: Path = PROJECT_ROOT
) -> Endpoint:
    """`python -m app` of `tree` with N frontend processes, on free local ports."""
    port, grpc_port, metrics_port = free_ports(3)
    routing = {**ROUTINGS.get(name, {}), **spec.parameters}
    repo = repository(log_dir / f"repository-{name}", spec, routing)
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
        **spec.env,
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
        *(("--data-parallel-size", str(spec.instances)) if spec.instances > 1 else ()),
        *flags,
    ]
    env = server_env(
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE=str(spec.kvcache_gib),
        PYTHONPATH=os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]),
        **spec.env,
    )
    server = ServerProcess(
        "vllm", argv, f"http://127.0.0.1:{port}", "/health", log_dir / "vllm.log", env, PROJECT_ROOT
    )
    return Endpoint(server, server.base_url, metrics=f"{server.base_url}/metrics")
