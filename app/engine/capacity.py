"""How many requests a model admits at once by default: what its engine can run at once,
plus as many waiting (each waits about one request's time for a place)."""

from __future__ import annotations

from typing import Any

WAITING_PER_RUNNING = 1
"""Requests admitted to wait for each one the engine can run."""


def admission_capacity(vllm_config: Any, clients: int = 1) -> int:
    """`(1 + WAITING_PER_RUNNING) x` the requests the engine can run at once: `max_num_seqs`,
    or fewer when its KV cache has fewer blocks (a running request holds at least one),
    shared evenly among the `clients` (frontend processes) of one engine core."""
    running = int(vllm_config.scheduler_config.max_num_seqs)
    blocks = vllm_config.cache_config.num_gpu_blocks
    if blocks:
        running = min(running, int(blocks))
    return max((1 + WAITING_PER_RUNNING) * running // max(clients, 1), 1)
