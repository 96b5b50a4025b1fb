"""vLLM's own `vllm` command works from the project's environment: on a host without a GPU,
`make setup` names the CPU build `vllm` too (scripts/vllm_cpu_alias.py), as vLLM's CLI asks."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

from app.paths import PROJECT_ROOT
from tests.deploy.test_makefile import dry_run

CLI_TIMEOUT_S = 300
"""`vllm --version` imports vLLM's CLI: about 10 s on a 2-core CPU, far more on a busy one."""


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "vllm_cpu_alias", PROJECT_ROOT / "scripts" / "vllm_cpu_alias.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


alias = load_script()
needs_cpu_build = pytest.mark.skipif(
    alias.cpu_release() is None, reason="vllm-cpu is not installed (a GPU host's CUDA vllm)"
)


def found(site: Path) -> dict[str, str]:
    """Each `vllm` distribution in `site`: version -> installer."""
    return {
        d.version: (d.read_text("INSTALLER") or "").strip()
        for d in metadata.distributions(name="vllm", path=[str(site)])
    }


@needs_cpu_build
def test_the_alias_names_the_cpu_build_as_vllms_platform_check_reads_it(tmp_path: Path) -> None:
    alias.make_alias(tmp_path, search=[str(tmp_path)])
    release = metadata.version("vllm-cpu") + "+cpu"
    assert found(tmp_path) == {release: alias.INSTALLER}
    assert "resolves already" in alias.make_alias(tmp_path, search=[str(tmp_path)])


@needs_cpu_build
def test_an_alias_of_an_older_release_is_replaced(tmp_path: Path) -> None:
    alias.write_alias(tmp_path, "0.1.0+cpu")
    alias.make_alias(tmp_path, search=[str(tmp_path)])
    assert list(found(tmp_path)) == [metadata.version("vllm-cpu") + "+cpu"]


@needs_cpu_build
def test_a_real_vllm_is_left_alone(tmp_path: Path) -> None:
    real = tmp_path / "vllm-0.25.0.dist-info"
    real.mkdir()
    (real / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.25.0\n")
    (real / "INSTALLER").write_text("pip\n")
    assert "no alias needed" in alias.make_alias(tmp_path, search=[str(tmp_path)])
    assert found(tmp_path) == {"0.25.0": "pip"}


def test_setup_makes_the_alias_on_a_cpu_host_only(tmp_path: Path) -> None:
    assert "scripts/vllm_cpu_alias.py" in dry_run("setup", tmp_path, gpu=False)
    assert "vllm_cpu_alias" not in dry_run("setup", tmp_path, gpu=True)


def test_the_vllm_command_prints_its_version() -> None:
    """`vllm --version` as a user runs it from the environment `make setup` made."""
    command = Path(sys.executable).parent / "vllm"
    if not command.exists():
        pytest.skip(f"{command} is not installed")
    result = subprocess.run(
        [str(command), "--version"], capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == metadata.version("vllm")
