"""What the engine says about one level of a realistic workload, read from the server's
`vllm:` metrics before and after it (the same series on ours and on `vllm serve`): the
mean time requests waited in the scheduler's queue, spent in prefill, and took to their
first token as the engine's frontend saw it, the mean tokens an engine step ran, and the
preemptions and prefix-cache hits, and the requests each engine finished (ours' `instance`
label, `vllm serve`'s `engine`). Where the clients' TTFT differs but these agree, the
difference is outside the engine."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

MEANS = {
    "queue_ms": "vllm:request_queue_time_seconds",
    "prefill_ms": "vllm:request_prefill_time_seconds",
    "engine_ttft_ms": "vllm:time_to_first_token_seconds",
    "step_tokens": "vllm:iteration_tokens_total",
}
"""Histograms whose mean over a level is reported (seconds shown as ms)."""
COUNTS = {
    "preemptions": "vllm:num_preemptions",
    "prefix_hits": "vllm:prefix_cache_hits",
    "prefix_queries": "vllm:prefix_cache_queries",
}
"""Counters whose increase over a level is reported."""
FINISHED = "vllm:e2e_request_latency_seconds_count"
ENGINE_LABELS = ("instance", "engine")
SCRAPE_TIMEOUT_SECONDS = 30


def scrape(url: str) -> dict[str, float]:
    """The sums (over every label set) of the series `MEANS` and `COUNTS` read."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_SECONDS) as response:
        text = response.read().decode()
    return totals(text)


def totals(text: str) -> dict[str, float]:
    """Each wanted histogram's `_sum` and `_count` and each counter's `_total`, summed."""
    wanted = {f"{name}{end}" for name in MEANS.values() for end in ("_sum", "_count")}
    wanted |= {f"{name}_total" for name in COUNTS.values()}
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
            if sample.name == FINISHED:
                engine = next((sample.labels[k] for k in ENGINE_LABELS if k in sample.labels), "")
                key = f"{FINISHED}@{engine}"
                found[key] = found.get(key, 0.0) + sample.value
    return found


def level_stats(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any]:
    """The level's means and counts from the totals read before and after it."""

    def grown(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    stats: dict[str, Any] = {}
    for key, family in MEANS.items():
        count = grown(f"{family}_count")
        if count > 0:
            scale = 1.0 if key == "step_tokens" else 1000.0
            stats[key] = round(scale * grown(f"{family}_sum") / count, 2)
    for key, family in COUNTS.items():
        stats[key] = round(grown(f"{family}_total"), 1)
    engines = sorted(name for name in after if name.startswith(f"{FINISHED}@"))
    if len(engines) > 1:
        stats["per_engine"] = [round(grown(name)) for name in engines]
    return stats
