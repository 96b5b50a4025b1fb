"""`make bench`'s routing target: its model copy (two CPU instances, the routing, the bounded
KV cache), its shared-prefix traffic, its report from made-up counters, and a smoke run of
`python -m bench --targets routing` on the engine double."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from app.paths import PROJECT_ROOT
from app.repository.instances import HostDevices, InstanceKind
from app.repository.layout import load_model
from bench import runs
from bench.__main__ import main
from bench.routing import (
    PREFIXES,
    RoutingConfig,
    RoutingRun,
    routing_lines,
    routing_repository,
    shared_prefix_prompts,
    summarize,
)

MODEL_DIR = PROJECT_ROOT / "configs" / "model_repository" / "smollm2"


def test_the_model_copy_has_two_cpu_instances_routed_as_asked(tmp_path: Path) -> None:
    root = routing_repository(MODEL_DIR, tmp_path, "prefix", kv_blocks=48)
    (spec,) = load_model(root / "smollm2", root, devices=HostDevices(gpus=[], cpus=[0, 1]))
    assert [(i.kind, i.cpus) for i in spec.instance_plan] == [
        (InstanceKind.CPU, (0,)),
        (InstanceKind.CPU, (1,)),
    ]
    assert spec.routing.mode.value == "prefix" and spec.flag("APPLY_CHAT_TEMPLATE")
    assert spec.engine_args["num_gpu_blocks_override"] == 48
    assert not (MODEL_DIR / "1" / "model.json").read_text().count("num_gpu_blocks_override")


def test_the_traffic_asks_each_of_eight_long_prefixes_as_often_in_a_mixed_order() -> None:
    prompts = shared_prefix_prompts(RoutingConfig(requests=32, prefix_words=300))
    prefixes = {prompt.split(" Question")[0] for prompt in prompts}
    assert len(prompts) == 32 and len(prefixes) == PREFIXES
    assert all(len(prefix.split()) > 300 for prefix in prefixes)
    assert len({p.split(":")[0] for p in prefixes}) == PREFIXES, "they differ from their start"
    assert prompts != sorted(prompts) and prompts == shared_prefix_prompts(
        RoutingConfig(requests=32, prefix_words=300)
    )


def test_the_report_compares_prefix_aware_with_least_loaded() -> None:
    def counters(
        hits: float, queries: float, done: tuple[float, float]
    ) -> dict[str, dict[str, float]]:
        return {
            "vllm:prefix_cache_hits_total": {"0": hits / 2, "1": hits / 2},
            "vllm:prefix_cache_queries_total": {"0": queries / 2, "1": queries / 2},
            "vllm:e2e_request_latency_seconds_count": {"0": done[0], "1": done[1]},
        }

    zero = counters(0, 0, (0, 0))
    least = summarize("least_loaded", [0.4] * 9 + [2.0], 11, zero, counters(300, 1000, (5, 5)), 9)
    prefix = summarize("prefix", [0.1] * 9 + [1.0], 10, zero, counters(800, 1000, (4, 6)), 5)
    assert (least.errors, least.hit_rate, least.per_instance) == (1, 0.3, {"0": 5, "1": 5})
    assert prefix.ttft_p50_ms == 100.0 and prefix.ttft_p99_ms == 1000.0
    lines = routing_lines([least, prefix], RoutingConfig())
    assert lines[1] == (
        "  least_loaded TTFT p50 400 ms, p99 2,000 ms; prefix-cache hits 30%; "
        "requests per instance 5/5; 1 errors"
    )
    assert "prefix-cache hits 80%; requests per instance 4/6; 0 errors" in lines[2]
    assert lines[3] == "  prefix-aware / least-loaded: TTFT p50 0.25×, p99 0.50×"


def test_the_routing_target_runs_both_routings(tmp_path: Path) -> None:
    """`python -m bench --targets routing` on the engine double: two servers, no error."""
    options = ["--routing-double", "--routing-requests", "16", "--routing-concurrency", "4"]
    code = main(["--targets", "routing", *options, "--out", str(tmp_path), "--quiet"])
    assert code == 0
    [path] = tmp_path.glob("bench-*.json")
    payload = json.loads(path.read_text())
    assert payload["failures"] == {}
    runs = payload["reliability"]["routing"]["runs"]
    assert [run["routing"] for run in runs] == ["least_loaded", "prefix"]
    for run in runs:
        assert run["requests"] == 16 and run["errors"] == 0 and run["ttft_p50_ms"] > 0
        assert run["hit_rate"] is None  # the double has no prefix cache


def test_a_recorded_routing_run_is_listed_on_the_results_page(tmp_path: Path) -> None:
    folder = tmp_path / "2026-01-01-cpu-routing"
    folder.mkdir()
    meta = {"date": "2026-01-01", "sequence": 1, "kind": "cpu-reliability", "about": "Why."}
    meta |= {key: key for key in ("title", "machine", "software", "commit", "command")}
    (folder / "run.json").write_text(json.dumps(meta))
    least = RoutingRun("least_loaded", 64, 0, 800.0, 2000.0, 0.2, {"0": 32, "1": 32}, 60.0)
    prefix = RoutingRun("prefix", 64, 0, 400.0, 1500.0, 0.8, {"0": 30, "1": 34}, 50.0)
    figures = {"config": asdict(RoutingConfig()), "runs": [asdict(least), asdict(prefix)]}
    (folder / "results.json").write_text(json.dumps({"reliability": {"routing": figures}}))
    page = runs.page(tmp_path)
    assert "- least_loaded TTFT p50 800 ms, p99 2,000 ms; prefix-cache hits 20%;" in page
    assert "- prefix-aware / least-loaded: TTFT p50 0.50×, p99 0.75×" in page
