"""A burst on the default configuration, as `make serve` starts it (the session's server): 256
streams with ~40-token prompts at once over Triton SSE, Triton gRPC and OpenAI. Each
completes or is refused at the door (503 / UNAVAILABLE before any output); none fails once
it started, and the engine, busy for a minute, is never restarted."""

from __future__ import annotations

import asyncio

import httpx

from bench.burst import burst, seeded_burst, summarize
from bench.traffic import Outcome, Servers, Traffic
from tests.integration.test_metrics_and_health import scrape
from tests.support.servers import RunningServer

STREAMS = 256
MAX_TOKENS = 16


async def send_burst(server: RunningServer) -> list[Outcome]:
    async with Traffic(Servers(server.base_url, server.grpc_url)) as traffic:
        return await burst(traffic, STREAMS, MAX_TOKENS)


def test_a_burst_completes_or_is_refused_at_the_door_and_keeps_the_engine(
    server: RunningServer, http: httpx.Client
) -> None:
    restarts = scrape(http).get("server_engine_restarts_total", 0.0)
    outcomes = asyncio.run(send_burst(server))
    report = summarize(outcomes)
    print("\n".join(report.lines()))
    assert report.failed == []
    assert report.completed + report.refused == STREAMS and report.completed >= STREAMS * 3 // 4
    done = [o for o in outcomes if o.completed]
    assert {(o.tokens, o.finish_reason) for o in done} == {(MAX_TOKENS, "length")}
    assert {o.protocol for o in done} == {"sse", "grpc", "openai"}
    assert all(o.tokens == 0 for o in outcomes if o.refused)
    assert scrape(http).get("server_engine_restarts_total", 0.0) == restarts
    assert http.get("/v2/health/ready").status_code == 200


SEEDED = {"sse": 96, "openai": 32}
SEEDED_MAX_TOKENS = 32


async def send_seeded_burst(server: RunningServer) -> list[Outcome]:
    async with Traffic(Servers(server.base_url, server.grpc_url)) as traffic:
        return await seeded_burst(traffic, SEEDED, SEEDED_MAX_TOKENS)


def test_a_burst_of_seeded_streams_keeps_the_engine(
    server: RunningServer, http: httpx.Client
) -> None:
    """128 seeded streams at once: prompts split over the engine's steps no longer kill it
    (vLLM's CPU worker could not rewind a seeded generator: app/engine/seeded_sampling.py)."""
    restarts = scrape(http).get("server_engine_restarts_total", 0.0)
    outcomes = asyncio.run(send_seeded_burst(server))
    report = summarize(outcomes)
    print("\n".join(report.lines()))
    assert report.failed == []
    assert report.completed >= 96 and report.completed + report.refused == sum(SEEDED.values())
    done = [o for o in outcomes if o.completed]
    assert {(o.tokens, o.finish_reason) for o in done} == {(SEEDED_MAX_TOKENS, "length")}
    assert scrape(http).get("server_engine_restarts_total", 0.0) == restarts
    assert http.get("/v2/health/ready").status_code == 200
