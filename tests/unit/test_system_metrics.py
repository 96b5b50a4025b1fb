"""Triton's CPU and GPU gauges: psutil's readings with Triton's formulas, the GPUs
CUDA_VISIBLE_DEVICES leaves visible, GPU series only where there is a GPU, sampling every
interval; the command line's --allow-cpu-metrics, --allow-gpu-metrics and
--metrics-interval-ms reaching them."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from app.cli.main import settings_from
from app.main import create_app
from app.observability.exposition import exposition
from app.observability.gpus import GpuSample, Nvml, visible
from app.observability.system_metrics import (
    CpuTimes,
    SystemMetrics,
    SystemSample,
    cpu_times_of,
    cpu_utilization,
    memory_of,
    read_cpu_times,
    read_memory,
)
from tests.doubles import FakeEngine
from tests.support.waiting import wait_for


def test_cpu_times_are_tritons_sums_of_psutils() -> None:
    times = SimpleNamespace(
        user=1.0, nice=0.05, system=0.5, idle=8.0, iowait=0.4, irq=0.03, softirq=0.02, steal=0.01
    )
    busy = cpu_times_of(times).busy
    assert busy == pytest.approx(1.0 + 0.05 + 0.5 + 0.03 + 0.02 + 0.01)
    assert cpu_times_of(times).idle == pytest.approx(8.4)
    assert cpu_times_of(SimpleNamespace(user=1.0, system=2.0, idle=3.0)) == CpuTimes(3.0, 3.0)
    host = read_cpu_times()
    assert host is not None and host.busy > 0 and host.idle > 0


def test_utilization_is_the_busy_share_between_two_readings() -> None:
    assert cpu_utilization(CpuTimes(160, 840), CpuTimes(100, 800)) == 0.6
    assert cpu_utilization(CpuTimes(100, 800), CpuTimes(100, 800)) == 0.0
    assert cpu_utilization(None, CpuTimes(1, 1)) == 0.0


def test_used_memory_is_total_less_available() -> None:
    assert memory_of(SimpleNamespace(total=16000, available=6000)) == (16000, 10000)
    assert memory_of(SimpleNamespace(total=10, available=20)) == (0, 0)
    total, used = read_memory()
    assert 0 < used < total


@pytest.mark.parametrize(
    ("selection", "index", "uuid", "shown"),
    [
        (None, 3, "GPU-abc", True),
        ("", 0, "GPU-abc", False),
        ("0,2", 2, "GPU-abc", True),
        ("0,2", 1, "GPU-abc", False),
        ("GPU-ab", 5, "GPU-abc", True),
        ("GPU-x", 0, "GPU-abc", False),
    ],
)
def test_the_gpus_cuda_visible_devices_names(
    selection: str | None, index: int, uuid: str, shown: bool
) -> None:
    assert visible(index, uuid, selection) is shown


def test_no_gpu_no_gpu_series() -> None:
    nvml = Nvml.open()
    if nvml is not None:
        nvml.close()
        pytest.skip("NVML sees a GPU on this host: the check is for a host without one")
    registry = CollectorRegistry()
    metrics = SystemMetrics(0.05)
    registry.register(metrics)
    metrics.start()
    try:
        text = exposition(registry).decode()
    finally:
        metrics.stop()
    assert "nv_cpu_memory_used_bytes" in text and "nv_gpu" not in text and "nv_energy" not in text


def test_each_gpu_is_reported_by_its_uuid() -> None:
    registry = CollectorRegistry()
    metrics = SystemMetrics(1.0, cpu=False)
    registry.register(metrics)
    gpus = (
        GpuSample("GPU-1", 0.25, 80, 20, 150.5, 700.0, 12.5),
        GpuSample("GPU-2", 1.0, 80, 80, None, None, None),
    )
    metrics.latest = SystemSample(gpus=gpus)
    text = exposition(registry).decode()
    assert "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)" in text
    assert 'nv_gpu_utilization{gpu_uuid="GPU-1"} 0.25' in text
    assert 'nv_gpu_memory_total_bytes{gpu_uuid="GPU-2"} 80.0' in text
    assert 'nv_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 20.0' in text
    assert (
        'nv_gpu_power_usage{gpu_uuid="GPU-1"} 150.5' in text
        and 'nv_gpu_power_usage{gpu_uuid="GPU-2"}' not in text
    )
    assert (
        "# TYPE nv_energy_consumption counter" in text
        and 'nv_energy_consumption{gpu_uuid="GPU-1"} 12.5' in text
    )
    assert "nv_cpu" not in text


def test_the_gauges_are_sampled_every_interval() -> None:
    metrics = SystemMetrics(0.05, gpu=False)
    metrics.start()
    try:
        first = metrics.latest
        time.sleep(0.3)
        assert metrics.latest is not first and metrics.latest.memory_total_bytes > 0
    finally:
        metrics.stop()


class OneGpu:
    """NVML as a host with one GPU answers it."""

    def sample(self) -> list[GpuSample]:
        return [GpuSample("GPU-1", 0.5, 80, 40, 100.0, 300.0, 1.0)]

    def close(self) -> None:
        pass


def served_metrics(repository: Path, *flags: str) -> str:
    """/metrics of the app the command line's flags configure (the engine double serving)."""
    settings = settings_from([f"--model-repository={repository}", *flags], "tritonserver")[0]
    with TestClient(create_app(settings, engine_factory=lambda spec: FakeEngine())) as client:
        text: str = client.get("/metrics").text
        return text


@pytest.mark.parametrize(
    ("flags", "cpu", "gpu"),
    [
        ((), True, True),
        (("--allow-gpu-metrics=false",), True, False),
        (("--allow-cpu-metrics=false",), False, True),
        (("--allow-cpu-metrics=off", "--allow-gpu-metrics=0"), False, False),
    ],
)
def test_the_allow_flags_keep_the_cpu_and_gpu_series_out(
    repository: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], cpu: bool, gpu: bool
) -> None:
    monkeypatch.setattr(Nvml, "open", staticmethod(OneGpu))
    text = served_metrics(repository, *flags)
    assert "nv_inference_request_success" in text
    assert ("nv_cpu_utilization" in text) is cpu and ("nv_cpu_memory_used_bytes" in text) is cpu
    assert ('nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5' in text) is gpu
    assert ("nv_gpu_" in text) is gpu and ("nv_energy_consumption" in text) is gpu


def test_metrics_interval_ms_is_the_sampling_interval(repository: Path) -> None:
    settings = settings_from(
        [f"--model-repository={repository}", "--metrics-interval-ms=250"], "tritonserver"
    )[0]
    app = create_app(settings, engine_factory=lambda spec: FakeEngine())
    system_metrics = app.state.runtime.observability.system_metrics
    assert system_metrics.interval_seconds == 0.25
    with TestClient(app):
        first = system_metrics.latest
        assert wait_for(lambda: system_metrics.latest is not first, timeout=1.5), (
            "sampled again well before the default 2 s"
        )
