"""Triton's metrics of several frontend processes merged into one exposition: counters and
pending requests added up under Triton's own names, the host's gauges and the summaries'
quantiles (which cannot be added) taken from the largest."""

from __future__ import annotations

import re
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter

from app.core.timing import RequestTiming
from app.errors import OverloadedError
from app.multiprocess.metrics import merge_expositions
from app.observability.exposition import exposition
from app.observability.gpus import GpuSample
from app.observability.metrics_config import parse_metrics_config
from app.observability.statistics import InferenceStatistics
from app.observability.system_metrics import SystemMetrics, SystemSample
from app.observability.triton_metrics import TritonMetricsCollector


def process_exposition(
    successes: int, rejected: int, pending: int, cpu: float, slow_ms: int
) -> str:
    """One process's exposition: its requests, its pending ones, its view of the host."""
    config = parse_metrics_config(["summary_latencies=true", "histogram_latencies=true"])
    statistics = InferenceStatistics(config.latency_options())
    for _ in range(successes):
        timing = RequestTiming("m", "1", started_ns=0)
        timing.admitted_ns = timing.first_chunk_ns = timing.first_response_ns = 0
        timing.finished_ns, timing.complete = slow_ms * 1_000_000, True
        statistics.record_request(timing)
    for _ in range(rejected):
        refused = RequestTiming("m", "1", started_ns=0, finished_ns=1)
        refused.fail(OverloadedError("busy"))
        statistics.record_request(refused)
    served = [SimpleNamespace(name="m", version="1", in_flight=dict.fromkeys(range(pending)))]
    registry = CollectorRegistry()
    registry.register(TritonMetricsCollector(served, statistics, config))  # type: ignore[arg-type]
    host = SystemMetrics(1.0, cpu=True, gpu=True)
    gpu = GpuSample("GPU-1", 0.5, 80, 40, 300.0 + cpu, 700.0, 10.0)
    host.latest = SystemSample(cpu, 1000, 500, (gpu,))
    registry.register(host)
    return exposition(registry).decode()


def sample(text: str, line_start: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(line_start + " ")]
    return float(line.rsplit(" ", 1)[1])


def test_triton_metrics_merge_across_processes_under_their_own_names() -> None:
    merged = merge_expositions(
        [process_exposition(3, 1, 2, 0.25, 10), process_exposition(4, 0, 1, 0.75, 30)]
    ).decode()
    assert sample(merged, 'nv_inference_request_success{model="m",version="1"}') == 7
    assert (
        sample(merged, 'nv_inference_request_failure{model="m",reason="REJECTED",version="1"}') == 1
    )
    assert (
        sample(merged, 'nv_inference_request_failure{model="m",reason="BACKEND",version="1"}') == 0
    )
    assert (
        sample(merged, 'nv_inference_request_duration_us{model="m",version="1"}')
        == 3 * 10_000 + 4 * 30_000
    )
    assert sample(merged, 'nv_inference_pending_request_count{model="m",version="1"}') == 3
    assert (
        sample(merged, 'nv_inference_first_response_histogram_ms_count{model="m",version="1"}') == 7
    )
    assert sample(merged, 'nv_inference_request_summary_us_count{model="m",version="1"}') == 7
    assert (
        sample(merged, 'nv_inference_request_summary_us{model="m",quantile="0.5",version="1"}')
        == 30_000
    )
    assert sample(merged, "nv_cpu_utilization") == 0.75
    assert sample(merged, "nv_cpu_memory_total_bytes") == 1000
    assert sample(merged, 'nv_gpu_power_usage{gpu_uuid="GPU-1"}') == 300.75
    assert sample(merged, 'nv_energy_consumption{gpu_uuid="GPU-1"}') == 10
    assert "# TYPE nv_inference_request_success counter" in merged
    assert not re.search(r"^nv_\w+_total[{ ]", merged, re.MULTILINE)


def test_other_counters_keep_their_total_suffix() -> None:
    registry = CollectorRegistry()
    Counter("server_engine_restarts", "restarts", ["model"], registry=registry).labels("m").inc()
    text = exposition(registry).decode()
    assert 'server_engine_restarts_total{model="m"} 1.0' in text
