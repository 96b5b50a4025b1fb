"""The realistic workloads with several engines a server and the engine stand-in: each of
ours' targets routed as it says, `vllm serve` data parallel, the prefix-many workload, the
GPU acceptance runs' options, the routing table, the requests each engine finished, and the
stand-in's steps (which requests get a token, and how long the step takes)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import acceptance, engine_stats, realistic, workload_report
from bench.standin_profiles import PROFILES
from bench.workload_servers import ServerSpec, repository, vllm
from bench.workloads import SCALES, workload


def spec(tmp_path: Path, instances: int = 2, kind: str = "KIND_CPU") -> ServerSpec:
    engine_args = {"max_model_len": 64}
    return ServerSpec(tmp_path / "m", "m", engine_args, 2, instances=instances, instance_kind=kind)


def test_ours_has_the_instances_and_the_targets_routing(tmp_path: Path) -> None:
    routing = {"INSTANCE_ROUTING": "cache_aware", "INSTANCE_ROUTING_HIT_TOKENS": "32"}
    config = (
        repository(tmp_path / "a", spec(tmp_path), routing) / "m" / "config.pbtxt"
    ).read_text()
    assert "instance_group [ { count: 2 kind: KIND_CPU } ]" in config
    assert 'key: "INSTANCE_ROUTING" value: { string_value: "cache_aware" }' in config
    assert 'key: "INSTANCE_ROUTING_HIT_TOKENS" value: { string_value: "32" }' in config
    gpus = repository(tmp_path / "b", spec(tmp_path, kind="KIND_GPU")) / "m" / "config.pbtxt"
    assert "instance_group [ { count: 1 kind: KIND_GPU } ]" in gpus.read_text()  # one a GPU
    one = repository(tmp_path / "c", spec(tmp_path, instances=1)) / "m" / "config.pbtxt"
    assert "instance_group [ { count: 1 kind: KIND_MODEL } ]" in one.read_text()


def test_vllm_serve_runs_as_many_data_parallel_engines(tmp_path: Path) -> None:
    argv = vllm(spec(tmp_path), tmp_path).server.argv
    assert argv[argv.index("--data-parallel-size") + 1] == "2"
    assert "--data-parallel-size" not in vllm(spec(tmp_path, 1), tmp_path).server.argv


def test_prefix_many_asks_the_scales_many_prefixes(tmp_path: Path) -> None:
    plan = workload("prefix-many", SCALES["standin"], 0, 1, tmp_path, tmp_path)
    arguments = list(plan.arguments)
    assert arguments[arguments.index("--prefix-repetition-num-prefixes") + 1] == "64"
    prefix = list(workload("prefix", SCALES["standin"], 0, 1, tmp_path, tmp_path).arguments)
    assert prefix[prefix.index("--prefix-repetition-num-prefixes") + 1] == "8"


@pytest.mark.parametrize("name", sorted(acceptance.ACCEPTANCE))
def test_an_acceptance_run_sets_its_shapes_targets_and_levels(name: str) -> None:
    args = realistic.parse_args(["--acceptance", name, "--out", "/tmp/x"])
    plan = acceptance.ACCEPTANCE[name]
    assert args.gpu and args.shapes == list(plan.shapes) and args.rounds == 1
    assert (args.processes, args.clients) == (4, 4)
    assert args.targets.split(",") == list(plan.targets)
    engine = realistic.engine_args(args, len(plan.targets))
    assert engine["max_model_len"] == 2048 and engine["max_num_seqs"] == 1024
    assert engine.get("num_gpu_blocks_override") == plan.kv_blocks
    for shape in plan.shapes:
        assert set(args.levels[shape]) == set(args.workloads.split(","))
    if name == "2gpu":
        assert args.instances == 2 and args.levels["1b"]["prefix-many"].many_prefixes == 512


def test_an_acceptance_run_takes_the_shapes_asked_for_among_its_own() -> None:
    args = realistic.parse_args(["--acceptance", "1gpu", "--shapes", "8b", "--out", "/tmp/x"])
    assert args.shapes == ["8b"] and set(args.levels["8b"]) == {"variable", "prefix", "poisson"}
    with pytest.raises(SystemExit):
        realistic.parse_args(["--acceptance", "2gpu", "--shapes", "8b", "--out", "/tmp/x"])


def level(target: str, tok_s: float, hits: float, per_engine: list[int]) -> dict[str, Any]:
    return {
        "shape": "s",
        "workload": "prefix-many",
        "target": target,
        "round": 0,
        "tok_s": tok_s,
        "ttft_p50_ms": 100.0,
        "ttft_p99_ms": 200.0,
        "ttft_mean_ms": 120.0,
        "itl_p50_ms": 10.0,
        "itl_p99_ms": 20.0,
        "requests": 8,
        "failed": 0,
        "engine": {
            "prefix_hits": hits,
            "prefix_queries": 100.0,
            "per_engine": per_engine,
            "engine_ttft_ms": 90.0,
            "queue_ms": 10.0,
            "prefill_ms": 40.0,
        },
    }


def test_the_table_sets_each_routing_against_least_loaded_and_the_engines_view() -> None:
    records = [level("ours-openai", 100.0, 40.0, [4, 4]), level("ours-cache", 120.0, 70.0, [5, 3])]
    text = workload_report.render(records, "standin")
    assert "| s | prefix-many | ours-cache | 1.200 | 1.000 | 1.000 | 70% | 5/3 |" in text
    assert "| s | prefix-many | ours-openai | 1.000 | 1.000 | 1.000 | 40% | 4/4 |" in text
    assert "| s | prefix-many | ours-cache | 120 | 90 | 10 | 40 | 30 |" in text
    alone = workload_report.render(records[:1], "standin")
    assert "Routing between instances" not in alone


def test_each_engines_finished_requests_are_counted() -> None:
    def scrape(zero: float, one: float) -> dict[str, float]:
        return engine_stats.totals(
            f'vllm:e2e_request_latency_seconds_count{{instance="0"}} {zero}\n'
            f'vllm:e2e_request_latency_seconds_count{{instance="1"}} {one}\n'
        )

    assert engine_stats.level_stats(scrape(2, 3), scrape(7, 5))["per_engine"] == [5, 2]


class Scheduled(SimpleNamespace):
    """A scheduler output as the stand-in reads it."""


def scheduled(
    new: list[tuple[str, int, int]], cached: dict[str, int], counts: dict[str, int]
) -> Scheduled:
    return Scheduled(
        finished_req_ids=set(),
        scheduled_new_reqs=[
            SimpleNamespace(req_id=r, prompt_token_ids=[1] * length, num_computed_tokens=done)
            for r, length, done in new
        ],
        scheduled_cached_reqs=SimpleNamespace(
            req_ids=list(cached), num_computed_tokens=list(cached.values())
        ),
        num_scheduled_tokens=counts,
    )


def test_the_stand_in_gives_a_token_once_a_prompt_is_computed_and_times_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench.standin import TOKEN_ID, StandInExecutor

    monkeypatch.setenv("STANDIN_PROFILE", "1b-h100")
    monkeypatch.setenv("STANDIN_SLOWDOWN", "2")
    executor = StandInExecutor.__new__(StandInExecutor)
    executor._init_executor()
    waited: list[float] = []
    monkeypatch.setattr(executor, "_wait", waited.append)
    first = executor.step(scheduled([("a", 20, 0), ("b", 8, 4)], {}, {"a": 16, "b": 4}))
    assert first.sampled_token_ids == [[], [TOKEN_ID]]  # a: 16 of 20 prompt tokens; b: done
    cost = PROFILES["1b-h100"]
    assert waited[-1] == pytest.approx(2 * cost.ms(2, 16 + 8, 16 + 4))
    second = executor.step(scheduled([], {"a": 16, "b": 8}, {"a": 4, "b": 1}))
    assert second.sampled_token_ids == [[TOKEN_ID], [TOKEN_ID]]
    assert waited[-1] == pytest.approx(2 * cost.ms(2, 20 + 9, 4))


def test_parse_args_leaves_the_cpu_defaults_without_acceptance() -> None:
    args = realistic.parse_args(["--out", "/tmp/x", "--standin", "8b-h100"])
    assert args.scale == "standin" and args.rounds == 2 and args.levels == {}
    assert realistic.engine_args(args, 1)["distributed_executor_backend"].endswith(
        "StandInExecutor"
    )
    assert isinstance(args, argparse.Namespace)
