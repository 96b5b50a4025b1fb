"""The engine stand-in's GPU profiles (bench/standin.py): how long a GPU takes for one engine
step, fitted to the recorded H100 runs (benchmarks/runs/). No vLLM import: the bench drivers
read the names."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class StepCost:
    """A GPU's time for one engine step, in milliseconds."""

    base_ms: float
    per_sequence_ms: float
    per_context_token_ms: float
    """Reading the KV cache of each token the step's sequences attend to."""
    per_prompt_token_ms: float

    def ms(self, sequences: int, context_tokens: int, prompt_tokens: int) -> float:
        return (
            self.base_ms
            + self.per_sequence_ms * sequences
            + self.per_context_token_ms * context_tokens
            + self.per_prompt_token_ms * prompt_tokens
        )


PROFILES = {
    # 1b shape (Llama-3.2-1B dimensions) under vLLM 0.25 on an H100: ITL 2.4 ms at C = 1 and
    # 3 ms at C = 64 with short prompts (2026-11-24-h100-1b); 7-9 ms at C = 256 with 1,024-token
    # prompts and ~250k prompt tokens a second (2026-11-25-h100-workloads-1b).
    "1b-h100": StepCost(2.4, 0.01, 1.0e-5, 0.004),
    # 8b shape (Llama-3.1-8B): weights 8x, KV 4x the 1b's per token; ITL 12-18 ms with ~90
    # sequences of ~1,300 tokens, ~30k prompt tokens a second (2026-11-26-h100-workloads-8b).
    "8b-h100": StepCost(7.0, 0.02, 4.0e-5, 0.032),
}


def profile_from_env() -> tuple[StepCost, float]:
    name = os.environ.get("STANDIN_PROFILE", "1b-h100")
    if name not in PROFILES:
        raise ValueError(f"STANDIN_PROFILE must be one of {', '.join(PROFILES)}, got {name!r}")
    return PROFILES[name], float(os.environ.get("STANDIN_SLOWDOWN", "1"))
