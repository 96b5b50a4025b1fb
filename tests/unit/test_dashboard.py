"""The chart's Grafana dashboard reads only series that both this server and Triton with the
vLLM backend report, under the same names and labels."""

from __future__ import annotations

import json
import re
from typing import Any

from app.observability.system_metrics import CPU_FAMILIES, ENERGY, GPU_GAUGES
from app.observability.triton_metrics import (
    COUNTERS,
    FIRST_RESPONSE,
    LATENCY_COUNTERS,
    PENDING,
)
from app.paths import PROJECT_ROOT

DASHBOARD = (
    PROJECT_ROOT / "charts" / "triton-vllm-generate" / "dashboards" / "triton-vllm-generate.json"
)
TRITONS = {
    # Triton's core (src/metrics.cc) and the vLLM backend (src/utils/metrics.py)
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    "nv_inference_first_response_histogram_ms",
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
    "nv_cpu_utilization",
    "nv_cpu_memory_total_bytes",
    "nv_cpu_memory_used_bytes",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:gpu_cache_usage_perc",
}
METRIC = re.compile(r"\b(nv_[a-z0-9_]+|vllm:[a-z0-9_]+)")


def ours() -> set[str]:
    """The series this server reports: Triton's, and the vllm: ones its stat logger defines."""
    names = {
        *COUNTERS,
        *(name for name, _ in LATENCY_COUNTERS.values()),
        PENDING[0],
        FIRST_RESPONSE[0],
    }
    names |= {*CPU_FAMILIES, *GPU_GAUGES, ENERGY[0]}
    source = (PROJECT_ROOT / "app" / "engine" / "metrics.py").read_text()
    for kind, name in re.findall(r'(counter|histogram|gauge)\(\s*"(vllm:[a-z0-9_]+)"', source):
        names.add(name + "_total" if kind == "counter" and not name.endswith("_total") else name)
    return names


def expressions(panels: list[dict[str, Any]]) -> list[str]:
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def test_the_dashboard_reads_only_series_both_servers_report() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    used = {
        name.removesuffix("_bucket")
        for expr in expressions(dashboard["panels"])
        for name in METRIC.findall(expr)
    }
    assert used, "no metric in the dashboard"
    assert used - ours() == set()
    assert used - TRITONS == set()


def test_the_dashboard_is_importable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert variables == {"datasource", "model", "version"}
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert all(
                'model=~"$model"' in t["expr"] or "nv_cpu" in t["expr"] or "nv_gpu" in t["expr"]
                for t in panel["targets"]
            ), panel["title"]
