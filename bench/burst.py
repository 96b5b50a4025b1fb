"""The burst: many streaming requests at once over the three protocols, as users arriving
together would send them. A server that admits what its engine can hold completes those
and refuses the rest at the door (503 before any output); none fails once it has started."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.traffic import PROTOCOLS, Ask, Outcome, Traffic

CHAT_PROMPT = "Tell me about the sea and its tides and storms."
"""Through the default model's chat template (Triton SSE and gRPC): 41 tokens."""
RAW_PROMPT = (
    "The sea covers most of the Earth. Sailors, fishermen and scientists have studied its "
    "currents, its tides, its waves and its storms for many centuries. Here is what they all "
    "found:"
)
"""OpenAI's /v1/completions takes the prompt as it is: 38 tokens."""


@dataclass(frozen=True)
class BurstReport:
    """What a burst got: completed, refused at the door, failed after starting."""

    sent: int
    completed: int
    refused: int
    failed: list[str]
    ttft_p50: float | None
    ttft_p99: float | None
    seconds: float

    def lines(self) -> list[str]:
        ttft = "-" if self.ttft_p50 is None else f"{self.ttft_p50:.1f} s / {self.ttft_p99:.1f} s"
        summary = (
            f"burst of {self.sent} streams (SSE, gRPC, OpenAI): {self.completed} completed, "
            f"{self.refused} refused (503 before any output), {len(self.failed)} failed; "
            f"TTFT p50 / p99 {ttft}; {self.seconds:.0f} s"
        )
        return [summary, *(f"  failed: {error}" for error in self.failed[:5])]


def prompt_for(protocol: str) -> str:
    return RAW_PROMPT if protocol == "openai" else CHAT_PROMPT


async def burst(traffic: Traffic, count: int = 256, max_tokens: int = 16) -> list[Outcome]:
    """`count` streams sent at once, protocols taken in turn."""
    protocols = [PROTOCOLS[i % len(PROTOCOLS)] for i in range(count)]
    return list(
        await asyncio.gather(*(traffic.send(p, Ask(prompt_for(p), max_tokens)) for p in protocols))
    )


async def seeded_burst(
    traffic: Traffic, counts: dict[str, int], max_tokens: int = 32
) -> list[Outcome]:
    """`counts[protocol]` streams of each protocol sent at once, each sampled at temperature
    0.7 with a seed of its own (a seeded request whose prompt the engine splits over steps
    once killed vLLM's CPU engine core)."""
    protocols = [protocol for protocol, count in counts.items() for _ in range(count)]
    sends = (
        traffic.send(protocol, Ask(prompt_for(protocol), max_tokens, temperature=0.7, seed=i))
        for i, protocol in enumerate(protocols)
    )
    return list(await asyncio.gather(*sends))


def percentile(values: Sequence[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


def summarize(outcomes: list[Outcome]) -> BurstReport:
    ttfts = [o.ttft for o in outcomes if o.completed and o.ttft is not None]
    start = min((o.start for o in outcomes), default=0.0)
    end = max((o.end for o in outcomes), default=0.0)
    return BurstReport(
        sent=len(outcomes),
        completed=sum(o.completed for o in outcomes),
        refused=sum(o.refused for o in outcomes),
        failed=[
            f"{o.protocol}: {o.error or 'ended without a finish reason'}"
            for o in outcomes
            if o.failed
        ],
        ttft_p50=statistics.median(ttfts) if ttfts else None,
        ttft_p99=percentile(ttfts, 0.99),
        seconds=end - start,
    )
