"""The realistic workloads' engine view of a level (bench/engine_stats.py), from made-up
`vllm:` series as both servers expose them."""

from __future__ import annotations

from bench.engine_stats import level_stats, totals


def exposition(queue_sum: float, queue_count: int, steps: int, preemptions: int) -> str:
    lines = [
        "# TYPE vllm:request_queue_time_seconds histogram",
        f'vllm:request_queue_time_seconds_sum{{instance="0"}} {queue_sum / 2}',
        f'vllm:request_queue_time_seconds_count{{instance="0"}} {queue_count / 2}',
        f'vllm:request_queue_time_seconds_sum{{instance="1"}} {queue_sum / 2}',
        f'vllm:request_queue_time_seconds_count{{instance="1"}} {queue_count / 2}',
        "# TYPE vllm:iteration_tokens_total histogram",
        'vllm:iteration_tokens_total_bucket{le="+Inf"} 7',
        f"vllm:iteration_tokens_total_sum {steps * 64}",
        f"vllm:iteration_tokens_total_count {steps}",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total {preemptions}",
        "vllm:num_preemptions_created 1.7e9",
        "# TYPE vllm:generation_tokens counter",
        "vllm:generation_tokens_total 99",
    ]
    return "\n".join(lines) + "\n"


def test_a_levels_means_and_counts_come_from_what_grew_over_it() -> None:
    before = totals(exposition(queue_sum=1.0, queue_count=10, steps=100, preemptions=2))
    after = totals(exposition(queue_sum=3.0, queue_count=30, steps=300, preemptions=5))
    assert level_stats(before, after) == {
        "queue_ms": 100.0,
        "step_tokens": 64.0,
        "preemptions": 3.0,
        "prefix_hits": 0.0,
        "prefix_queries": 0.0,
    }


def test_series_a_server_lacks_are_left_out_not_zero() -> None:
    assert "prefill_ms" not in level_stats({}, {})
