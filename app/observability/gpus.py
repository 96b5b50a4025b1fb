"""The GPUs this server may use, read through NVML (nvidia-ml-py): utilization, memory, power
and energy of each, labelled by its UUID as Triton labels them."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any

import pynvml

logger = logging.getLogger(__name__)

MILLI = 1000.0


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's readings; None where the GPU or its driver does not report one."""

    uuid: str
    utilization: float | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    power_usage_watts: float | None
    power_limit_watts: float | None
    energy_joules: float | None


def visible(index: int, uuid: str, selection: str | None) -> bool:
    """Whether CUDA_VISIBLE_DEVICES (`selection`; None: unset, every GPU) names the GPU at
    NVML `index`, by index or by (a prefix of) its UUID."""
    if selection is None:
        return True
    for entry in (item.strip() for item in selection.split(",")):
        if entry.isdigit() and int(entry) == index:
            return True
        if entry and not entry.isdigit() and uuid.startswith(entry):
            return True
    return False


def reading(read: Any, *args: Any) -> Any:
    """One NVML reading, or None when the GPU does not support it."""
    try:
        return read(*args)
    except pynvml.NVMLError:
        return None


class Nvml:
    """An open NVML session over the visible GPUs; energy is counted from when it opened."""

    def __init__(self, handles: list[tuple[str, Any]]) -> None:
        self._handles = handles
        self._energy_start = {
            uuid: reading(pynvml.nvmlDeviceGetTotalEnergyConsumption, h) for uuid, h in handles
        }

    @classmethod
    def open(cls) -> Nvml | None:
        """NVML over the GPUs CUDA_VISIBLE_DEVICES leaves visible; None without NVML or GPUs."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            logger.info("No GPU metrics: NVML is not available (%s)", exc)
            return None
        selection = os.environ.get("CUDA_VISIBLE_DEVICES")
        handles = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            if visible(index, uuid, selection):
                handles.append((uuid, handle))
        if not handles:
            pynvml.nvmlShutdown()
            logger.info("No GPU metrics: no GPU is visible")
            return None
        logger.info("Collecting metrics for GPU(s): %s", ", ".join(uuid for uuid, _ in handles))
        return cls(handles)

    def close(self) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()

    def sample(self) -> list[GpuSample]:
        return [self._sample(uuid, handle) for uuid, handle in self._handles]

    def _sample(self, uuid: str, handle: Any) -> GpuSample:
        rates = reading(pynvml.nvmlDeviceGetUtilizationRates, handle)
        memory = reading(pynvml.nvmlDeviceGetMemoryInfo, handle)
        power = reading(pynvml.nvmlDeviceGetPowerUsage, handle)
        limit = reading(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        energy, start = (
            reading(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle),
            self._energy_start.get(uuid),
        )
        return GpuSample(
            uuid=uuid,
            utilization=None if rates is None else rates.gpu / 100.0,
            memory_total_bytes=None if memory is None else int(memory.total),
            memory_used_bytes=None if memory is None else int(memory.used),
            power_usage_watts=None if power is None else power / MILLI,
            power_limit_watts=None if limit is None else limit / MILLI,
            energy_joules=None if energy is None or start is None else (energy - start) / MILLI,
        )
