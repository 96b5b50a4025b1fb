"""Helpers for the deployment checks: the tools `make test` installs, and rendered charts."""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.paths import PROJECT_ROOT

CHART = PROJECT_ROOT / "charts" / "triton-vllm-generate"
EXAMPLES = CHART / "examples"
DOCKER = PROJECT_ROOT / "docker"
TOOLS_BIN = Path(os.environ.get("DEPLOY_TOOLS_BIN", PROJECT_ROOT / ".cache" / "tools" / "bin"))
RELEASE = "generate"

# Values files per case: the chart's defaults, then each example.
CASES: dict[str, tuple[Path, ...]] = {
    "default": (),
    "gpu": (EXAMPLES / "values-gpu.yaml",),
    "multi-gpu": (EXAMPLES / "values-multi-gpu.yaml",),
    "all-features": (EXAMPLES / "values-all-features.yaml",),
    "multi-node": (EXAMPLES / "values-multi-node.yaml",),
}


def tool(name: str) -> Path:
    """A binary installed by scripts/install_deploy_tools.py; its absence is a failure."""
    path = TOOLS_BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"{path} is missing: `make test` installs it (scripts/install_deploy_tools.py)",
            pytrace=False,
        )
    return path


def helm(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool("helm")), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=cwd,
    )


def value_args(files: tuple[Path, ...], sets: tuple[str, ...] = ()) -> list[str]:
    return [arg for f in files for arg in ("-f", str(f))] + [a for s in sets for a in ("--set", s)]


@cache
def render(case: str, sets: tuple[str, ...] = ()) -> tuple[dict[str, Any], ...]:
    """The manifests `helm template` renders for a case, as dicts."""
    result = helm("template", RELEASE, str(CHART), *value_args(CASES[case], sets))
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def find(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def one(docs: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any]:
    (doc,) = find(docs, kind)
    return doc


def server_pod(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The spec of the pods that run the server: the Deployment's, or in multi-node mode the
    LeaderWorkerSet's leader pods."""
    deployments = find(docs, "Deployment")
    if deployments:
        (deployment,) = deployments
        pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    else:
        leader_set = one(docs, "LeaderWorkerSet")
        pod = leader_set["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    return pod


def container(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    server: dict[str, Any]
    (server,) = server_pod(docs)["containers"]
    return server


def env(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The server's env entries by name (a plain value, or the valueFrom dict)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(docs)["env"]}


def model_repository_files(docs: tuple[dict[str, Any], ...]) -> dict[str, str]:
    """Files of the mounted model repository: path -> text, as the ConfigMap volume lays them."""
    pod = server_pod(docs)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "model-repository"]
    name = volume["configMap"]["name"]
    (config_map,) = [doc for doc in find(docs, "ConfigMap") if doc["metadata"]["name"] == name]
    data = config_map["data"]
    return {item["path"]: data[item["key"]] for item in volume["configMap"]["items"]}
