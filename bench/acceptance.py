"""The GPU acceptance runs of `python -m bench.realistic --acceptance 1gpu|2gpu`: ours against
`vllm serve` on the workloads where ours had to catch up, each sized to fit about 12 minutes
of a GPU host's time with the servers' starts.

- `1gpu`: the 1b and 8b shapes, one engine a server; ours with 4 frontend processes over
  `/v1` against `vllm serve --api-server-count 4`: variable lengths (1,024 ± 50 % prompt
  tokens, 256 ± 50 % new, 256 streams), 8 shared 512-token prefixes (128 streams), Poisson
  arrivals (60 a second on 1b, 20 on 8b).
- `2gpu`: the 1b shape on two engines a server (ours: one instance a GPU; vLLM:
  `--data-parallel-size 2`), ours routed by the engines' load (`ours-openai`) and
  cache-aware (`ours-cache`): the same three workloads, and 512 prefixes of 1,024 tokens with
  each engine's KV cache cut to 16,000 blocks (one engine holds under half of them, two most).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from bench.workloads import SCALES, Scale

GPU = SCALES["gpu"]
VARIABLE = replace(GPU, input_len=1024, output_len=256, concurrency=256)
PREFIX = replace(GPU, prefixes=8, prefix_len=512, suffix_len=256, concurrency=128)
ENGINE_ARGS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "max_model_len": 2048}
"""The issue's engine arguments, for both servers."""


@dataclass(frozen=True)
class Acceptance:
    """One acceptance run: what runs, and each level's size by shape and workload."""

    shapes: tuple[str, ...]
    targets: tuple[str, ...]
    instances: int
    levels: dict[str, dict[str, Scale]]
    """shape -> workload -> its size."""
    kv_blocks: int | None = None
    engine_args: dict[str, int] = field(default_factory=lambda: dict(ENGINE_ARGS))

    @property
    def workloads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(w for levels in self.levels.values() for w in levels))


def one_shape(prompts: int, rate: float) -> dict[str, Scale]:
    return {
        "variable": replace(VARIABLE, prompts=prompts),
        "prefix": replace(PREFIX, prompts=prompts),
        "poisson": replace(VARIABLE, prompts=prompts, rate=rate),
    }


ACCEPTANCE = {
    "1gpu": Acceptance(
        shapes=("1b", "8b"),
        targets=("ours-openai", "vllm"),
        instances=1,
        levels={"1b": one_shape(1024, 60.0), "8b": one_shape(512, 20.0)},
    ),
    "2gpu": Acceptance(
        shapes=("1b",),
        targets=("ours-openai", "ours-cache", "vllm"),
        instances=2,
        levels={
            "1b": {
                **one_shape(1024, 60.0),
                "prefix-many": replace(
                    PREFIX, prompts=4096, many_prefixes=512, prefix_len=1024, concurrency=128
                ),
            }
        },
        kv_blocks=16000,
    ),
}


def apply(args: Any, name: str) -> None:
    """Set bench.realistic's options (`args`) for acceptance run `name`: its shapes (or those
    of them `--shapes` names, so that a host with two GPUs can run each shape on one), targets,
    engines, KV cache and levels; 4 frontend processes (vLLM: API processes) and 4 client
    processes; one round unless more were asked for."""
    plan = ACCEPTANCE[name]
    args.scale = "gpu"
    asked = args.shapes.split(",") if args.shapes else plan.shapes
    unknown = set(asked) - set(plan.shapes)
    if unknown:
        raise SystemExit(f"--acceptance {name} runs the shapes {', '.join(plan.shapes)}")
    args.shapes = ",".join(asked)
    args.targets = ",".join(plan.targets)
    args.workloads = ",".join(plan.workloads)
    args.instances = plan.instances
    args.kv_blocks = args.kv_blocks or plan.kv_blocks
    args.processes = args.processes or 4
    args.clients = args.clients or 4
    args.rounds = args.rounds or 1
    args.levels = plan.levels
    args.gpu_engine_args = plan.engine_args
