"""Triton's CPU and GPU gauges, sampled every `--metrics-interval-ms` by a thread: CPU and
memory through psutil (Triton's formulas), GPUs through NVML (a host without NVML or GPUs has
no GPU series)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.observability.gpus import GpuSample, Nvml

logger = logging.getLogger(__name__)

GPU_LABELS = ("gpu_uuid",)
CPU_FAMILIES = {
    "nv_cpu_utilization": "CPU utilization rate [0.0 - 1.0]",
    "nv_cpu_memory_total_bytes": "CPU total memory (RAM), in bytes",
    "nv_cpu_memory_used_bytes": "CPU used memory (RAM), in bytes",
}
GPU_GAUGES = {
    "nv_gpu_utilization": ("utilization", "GPU utilization rate [0.0 - 1.0)"),
    "nv_gpu_memory_total_bytes": ("memory_total_bytes", "GPU total memory, in bytes"),
    "nv_gpu_memory_used_bytes": ("memory_used_bytes", "GPU used memory, in bytes"),
    "nv_gpu_power_usage": ("power_usage_watts", "GPU power usage in watts"),
    "nv_gpu_power_limit": ("power_limit_watts", "GPU power management limit in watts"),
}
ENERGY = (
    "nv_energy_consumption",
    "GPU energy consumption in joules since the Triton Server started",
)
SYSTEM_FAMILIES = frozenset([*CPU_FAMILIES, *GPU_GAUGES, ENERGY[0]])
"""Families that describe the host: every process of a group reports the same ones."""


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The host's CPU time (all CPUs), in seconds: busy (user, nice, system, irq, softirq,
    steal) and idle (idle, iowait), as Triton sums /proc/stat's `cpu` line."""

    busy: float
    idle: float


def cpu_times_of(times: Any) -> CpuTimes:
    """Triton's sums of psutil's `cpu_times()` (fields a platform lacks count 0)."""

    def seconds(*names: str) -> float:
        return sum(getattr(times, name, 0.0) for name in names)

    return CpuTimes(
        busy=seconds("user", "nice", "system", "irq", "softirq", "steal"),
        idle=seconds("idle", "iowait"),
    )


def read_cpu_times() -> CpuTimes | None:
    try:
        return cpu_times_of(psutil.cpu_times())
    except (OSError, psutil.Error):
        return None


def cpu_utilization(new: CpuTimes | None, old: CpuTimes | None) -> float:
    """The busy share of the time between two readings (0 when either is missing)."""
    if new is None or old is None:
        return 0.0
    busy, idle = max(0.0, new.busy - old.busy), max(0.0, new.idle - old.idle)
    return busy / (busy + idle) if busy + idle else 0.0


def memory_of(memory: Any) -> tuple[int, int]:
    """(total, used) bytes of RAM from psutil's `virtual_memory()`, used being total less
    available (Triton's choice); zeros for a reading that makes no sense."""
    total, available = int(memory.total), int(memory.available)
    if available > total:
        return 0, 0
    return total, total - available


def read_memory() -> tuple[int, int]:
    try:
        return memory_of(psutil.virtual_memory())
    except (OSError, psutil.Error):
        return 0, 0


@dataclass(frozen=True, slots=True)
class SystemSample:
    cpu_utilization: float = 0.0
    memory_total_bytes: int = 0
    memory_used_bytes: int = 0
    gpus: tuple[GpuSample, ...] = ()


@dataclass(eq=False)
class SystemMetrics(Collector):
    """Samples the host every `interval_seconds` (from `start` to `stop`); each scrape reports
    the latest sample."""

    interval_seconds: float
    cpu: bool = True
    gpu: bool = True
    latest: SystemSample = field(default_factory=SystemSample)
    _nvml: Nvml | None = None
    _cpu_times: CpuTimes | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        if not (self.cpu or self.gpu):
            return
        if self.gpu:
            self._nvml = Nvml.open()
        self._cpu_times = read_cpu_times() if self.cpu else None
        self.sample()
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            self._nvml.close()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_seconds):
            try:
                self.sample()
            except Exception:  # a sampler that dies would freeze the gauges silently
                logger.exception("sampling the CPU and GPU metrics failed")

    def sample(self) -> None:
        utilization, total, used = 0.0, 0, 0
        if self.cpu:
            times = read_cpu_times()
            utilization = cpu_utilization(times, self._cpu_times)
            self._cpu_times = times or self._cpu_times
            total, used = read_memory()
        gpus = self._nvml.sample() if self._nvml is not None else ()
        self.latest = SystemSample(utilization, total, used, tuple(gpus))

    def collect(self) -> Iterator[Metric]:
        sample = self.latest
        if self.cpu:
            values = (sample.cpu_utilization, sample.memory_total_bytes, sample.memory_used_bytes)
            for (name, doc), value in zip(CPU_FAMILIES.items(), values, strict=True):
                yield GaugeMetricFamily(name, doc, value=value)
        if not sample.gpus:
            return
        for name, (attribute, doc) in GPU_GAUGES.items():
            family = GaugeMetricFamily(name, doc, labels=GPU_LABELS)
            for gpu in sample.gpus:
                value = getattr(gpu, attribute)
                if value is not None:
                    family.add_metric([gpu.uuid], value)
            yield family
        energy = CounterMetricFamily(*ENERGY, labels=GPU_LABELS)
        for gpu in sample.gpus:
            if gpu.energy_joules is not None:
                energy.add_metric([gpu.uuid], gpu.energy_joules)
        yield energy
