"""Noise a new user would read as a fault, left out: vLLM's notes that OpenAI's Triton
compiler has no CPU backend (in every process, spawned ones too), and nanobind's leak report
for the objects of a heap frozen at shutdown."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from app.observability.vllm_notes import (
    COMPILER_CHECK,
    CPU_PLATFORM,
    CompilerNotes,
    leave_out_compiler_notes,
)
from app.paths import PROJECT_ROOT

RUN_TIMEOUT_S = 120


def kept(notes: CompilerNotes, name: str, message: str, level: int = logging.WARNING) -> bool:
    record = logging.LogRecord(name, level, "importing.py", 44, message, None, None)
    return notes.filter(record)


def test_the_cpu_builds_notes_about_tritons_compiler_are_left_out() -> None:
    notes = CompilerNotes()
    assert kept(notes, COMPILER_CHECK, "Triton is installed but 0 active driver(s) found")
    assert not kept(
        notes, COMPILER_CHECK, "Triton is installed, but doesn't include CPU backend. Disabling."
    )
    assert not kept(notes, COMPILER_CHECK, "Triton is installed but 0 active driver(s) found")
    assert not kept(notes, COMPILER_CHECK, "Triton not installed or not compatible", logging.INFO)
    assert not kept(notes, CPU_PLATFORM, "Triton is not installed. triton-cpu is expected on x86.")
    assert kept(notes, CPU_PLATFORM, "Reset SSM cache type to float32")
    assert kept(notes, "vllm.config.vllm", "Model Runner V2 requires Triton")


def test_the_filter_sits_on_vllms_loggers(caplog: pytest.LogCaptureFixture) -> None:
    leave_out_compiler_notes()
    leave_out_compiler_notes()
    compiler = logging.getLogger(COMPILER_CHECK)
    assert len([f for f in compiler.filters if isinstance(f, CompilerNotes)]) == 1
    with caplog.at_level(logging.INFO):
        compiler.warning("Triton is installed, but doesn't include CPU backend. Disabling Triton.")
        logging.getLogger(CPU_PLATFORM).info("OMP threads bound")
    assert [record.getMessage() for record in caplog.records] == ["OMP threads bound"]


NOISY_EXIT = """
import os, sys
from app.launch.quiet_exit import quiet_after_serving

class Late:
    def __del__(self):
        os.write(2, b"written while the interpreter exits\\n")

late = Late()
print("while serving", file=sys.stderr)
if sys.argv[1] == "served":
    quiet_after_serving()
"""


@pytest.mark.parametrize(("stage", "silenced"), [("served", True), ("starting", False)])
def test_once_the_server_has_stopped_the_interpreters_exit_writes_nothing(
    stage: str, silenced: bool
) -> None:
    """What nanobind prints for the objects of a frozen heap is written like `Late`'s line:
    during the interpreter's exit, after every atexit handler."""
    result = subprocess.run(
        [sys.executable, "-c", NOISY_EXIT, stage],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("while serving\n")
    assert ("written while the interpreter exits" in result.stderr) is not silenced


SPAWN_PROBE = """
import multiprocessing, runpy
import app.cli.main as cli

def spawn_one(prog):
    filters = "len(__import__('logging').getLogger('vllm.triton_utils.importing').filters)"
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print("filters in a spawned process:", pool.apply(eval, (filters,)))

cli.main = spawn_one
runpy._run_module_as_main("app")
"""


def test_processes_spawned_by_python_m_app_filter_vllms_notes_before_importing_it() -> None:
    """`python -m app` (runpy's way, serving swapped for spawning one process as vLLM spawns
    its engine cores): the spawned process runs app/__main__.py first, so its log filters are
    set before the process imports vLLM."""
    result = subprocess.run(
        [sys.executable, "-c", SPAWN_PROBE],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.stdout.strip() == "filters in a spawned process: 1", result.stderr[-2000:]
