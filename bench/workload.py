"""The closed-loop streaming workload: C clients, each sending R requests in turn."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

StreamFn = Callable[[str, int], AsyncIterator[int]]
"""Sends one request (prompt, new tokens) and yields the number of new tokens of each event."""

TOPICS = [
    "a lighthouse keeper",
    "the history of tea",
    "a robot learning to paint",
    "volcanoes",
    "a city under the sea",
    "the first bicycle",
    "a chess tournament",
    "migrating birds",
    "an old bookshop",
    "the northern lights",
    "a bakery at dawn",
    "a journey by train",
]


@dataclass(frozen=True, slots=True)
class Workload:
    """What every target is sent: the same prompts, lengths and concurrency levels."""

    concurrency: tuple[int, ...] = (1, 16, 64)
    requests: int = 8
    min_requests: int = 32
    max_tokens: int = 64
    warmup: bool = True

    def requests_per_client(self, concurrency: int) -> int:
        """R, raised at low concurrency so that each level has at least `min_requests`."""
        return max(self.requests, math.ceil(self.min_requests / concurrency))


@dataclass(slots=True)
class RequestRecord:
    """One request: when it was sent, when each event with tokens arrived, how it ended."""

    start: float
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    end: float = 0.0
    error: str | None = None

    @property
    def tokens(self) -> int:
        return sum(self.counts)


@dataclass(slots=True)
class LevelRun:
    """All requests of one concurrency level and the wall time they took together."""

    concurrency: int
    records: list[RequestRecord]
    seconds: float


def prompts(namespace: str = "") -> Iterator[str]:
    """Distinct prompts, the same sequence for every target (they differ from the first token)."""
    for index in itertools.count():
        topic = TOPICS[index % len(TOPICS)]
        yield f"{namespace}{index}. Write a long and detailed story about {topic}."


async def run_request(stream: StreamFn, prompt: str, max_tokens: int) -> RequestRecord:
    """Send one request; an exception or a wrong token count is recorded as its error."""
    record = RequestRecord(start=time.perf_counter())
    try:
        async for count in stream(prompt, max_tokens):
            if count > 0:
                record.times.append(time.perf_counter())
                record.counts.append(count)
        if record.tokens != max_tokens:
            record.error = f"got {record.tokens} tokens, expected {max_tokens}"
    except Exception as exc:  # noqa: BLE001 - a failed request is a figure, not a crash
        record.error = f"{type(exc).__name__}: {exc}"[:300]
    record.end = time.perf_counter()
    return record


async def run_level(
    stream: StreamFn,
    concurrency: int,
    per_client: int,
    max_tokens: int,
    prompt_source: Iterator[str],
    on_request: Callable[[RequestRecord], None] | None = None,
) -> LevelRun:
    """`concurrency` clients, each sending `per_client` requests one after another."""
    records: list[RequestRecord] = []

    async def client() -> None:
        for _ in range(per_client):
            record = await run_request(stream, next(prompt_source), max_tokens)
            records.append(record)
            if on_request is not None:
                on_request(record)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return LevelRun(concurrency, records, time.perf_counter() - start)
