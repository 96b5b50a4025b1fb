"""Engine arguments chosen for the CPU the engine runs on, where model.json leaves them unset:
the dtype, by what the CPU computes natively, and the worker, whose seeded sampling survives
a prompt split over several steps (app/engine/seeded_sampling.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CPUINFO = Path("/proc/cpuinfo")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
SEEDED_SAMPLING_WORKER = "app.engine.seeded_sampling.SeededSamplingCPUWorker"
"""vLLM's CPU worker with a seeded generator's rewind that works on CPU (vLLM's own kills the
engine core when a seeded request's prompt is split: "CPU Generator does not use offset")."""
"""/proc/cpuinfo flags of CPUs that compute bfloat16 natively (AVX512-BF16, AMX)."""


@dataclass(frozen=True)
class CpuHost:
    """What the engine arguments' choice depends on: the CPU's flags."""

    flags: frozenset[str]

    @classmethod
    def this(cls) -> CpuHost:
        return cls(cpu_flags(CPUINFO))

    @property
    def native_bf16(self) -> list[str]:
        return [flag for flag in NATIVE_BF16_FLAGS if flag in self.flags]


def cpu_flags(cpuinfo: Path) -> frozenset[str]:
    """The CPU's feature flags (the first processor's `flags` line); none when unreadable."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cpu_engine_defaults(
    engine_args: dict[str, Any], host: CpuHost
) -> tuple[dict[str, Any], dict[str, str]]:
    """`engine_args` with the CPU defaults added where model.json does not set them, and for
    each argument considered, the value the server went with and why."""
    chosen = dict(engine_args)
    notes: dict[str, str] = {}
    if "dtype" not in engine_args:
        native = host.native_bf16
        if native:
            notes["dtype"] = f"auto: this CPU computes bfloat16 natively ({', '.join(native)})"
        else:
            chosen["dtype"] = "float32"
            notes["dtype"] = (
                "float32: this CPU has no native bfloat16 (neither AVX512-BF16 nor AMX), "
                "where bfloat16 runs several times slower"
            )
    if engine_args.get("worker_cls", "auto") == "auto":
        chosen["worker_cls"] = SEEDED_SAMPLING_WORKER
    return chosen, notes


def log_choices(path: Path, notes: dict[str, str]) -> None:
    for name, note in notes.items():
        logger.info("%s: %s = %s (model.json does not set it)", path, name, note)
