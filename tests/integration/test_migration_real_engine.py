"""Requests that survive their engine, against the real engine: an engine core killed (SIGKILL)
or stopped (SIGSTOP) in the middle of streams over Triton SSE, gRPC and OpenAI, LoRA and
n > 1 among them. Every request finishes with all its tokens, as one uninterrupted stream
(at temperature 0 with the same text as a run without the crash); once the restarts are
spent, requests end with the backend's error and liveness fails, as without migration.

Through the kill: Triton SSE and gRPC streams, a non-streaming gRPC request, OpenAI
completion streams, n = 2 requests streamed (OpenAI chat) and whole (Triton HTTP, OpenAI).

A request that was running at two engine deaths in a row ends with an engine fault (it
may be what kills the engine); those started on the replacement resume.

One server for the module (the tests run in order: four restarts are allowed, the first two
tests use one each, the third two): the default model with LoRA enabled and an adapter made
here. The LoRA streams run in the second test: batched with a LoRA request, vLLM's CPU
engine gives the other requests of the batch other greedy text than alone, which the first
test compares.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import httpx
import psutil
import pytest
import tritonclient.grpc.aio as triton_grpc_aio

from app.paths import PROJECT_ROOT
from bench.burst import CHAT_PROMPT, RAW_PROMPT
from bench.traffic import Ask, Outcome, Servers, Traffic
from tests.integration.test_metrics_and_health import scrape
from tests.integration.test_repository_real_engine import make_adapter, write_json
from tests.support.servers import RunningServer, start_server
from tests.support.triton_grpc import aio_stream_results, is_final, vllm_request
from tests.support.waiting import wait_for

MAX_TOKENS = 64
STALL_SECONDS = 15
UNHEALTHY = "Model is unavailable due to unhealthy vLLM engine"
GENERATE = "/v2/models/smollm2/generate"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("migration") / "repository"
    shutil.copytree(PROJECT_ROOT / "configs" / "model_repository", root)
    version = root / "smollm2" / "1"
    engine_args = json.loads((version / "model.json").read_text())
    # float32 on every host: the greedy comparison needs the resumed prefill to pick the tokens
    # the uninterrupted decode picked (bfloat16's rounding flips near ties between batchings)
    overrides = {"enable_lora": True, "max_lora_rank": 8, "dtype": "float32"}
    write_json(version / "model.json", {**engine_args, **overrides})
    write_json(version / "multi_lora.json", {"doc": "adapters/doc"})
    make_adapter(version / "adapters" / "doc")
    env = {
        "ENGINE_RESTART_MAX": "4",
        "ENGINE_RESTART_BACKOFF_SECONDS": "0.2",
        "ENGINE_RESTART_BACKOFF_MAX_SECONDS": "1",
        "ENGINE_STALL_SECONDS": str(STALL_SECONDS),
        "ENGINE_PROBE_INTERVAL_SECONDS": "2",
        "ENGINE_PROBE_TIMEOUT_SECONDS": "5",
    }
    running = start_server("--model-repository", str(root), name="migration", env=env)
    yield running
    code, alive = running.stop(signal.SIGTERM)
    for process in alive:
        process.kill()
    assert code == 0 and not alive, running.log_tail()


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=300) as client:
        yield client


def engine_core(server: RunningServer) -> psutil.Process:
    return next(
        p
        for p in psutil.Process(server.process.pid).children(recursive=True)
        if "EngineCore" in p.name()
    )


def prompt_of(protocol: str) -> str:
    return RAW_PROMPT if protocol == "openai" else CHAT_PROMPT


async def while_streaming(
    server: RunningServer,
    asks: list[tuple[str, Ask]],
    act: Callable[[], None],
    others: Sequence[Awaitable[Any]] = (),
) -> tuple[list[Outcome], list[Any]]:
    """Start the streams (and `others`), `act` once every stream has produced a token, then
    wait for them all."""
    async with Traffic(Servers(server.base_url, server.grpc_url), timeout=600) as traffic:
        streams = [asyncio.ensure_future(traffic.send(protocol, ask)) for protocol, ask in asks]
        rest = [asyncio.ensure_future(other) for other in others]
        started = time.monotonic()
        outcomes = traffic.live
        while len(outcomes) < len(asks) or not all(o.tokens for o in outcomes):
            assert time.monotonic() - started < 120, "the streams did not start"
            await asyncio.sleep(0.05)
        assert not any(o.finish_reason for o in outcomes), (
            "a stream finished before the engine went away"
        )
        act()
        return list(await asyncio.gather(*streams)), list(await asyncio.gather(*rest))


async def triton_whole(server: RunningServer, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as client:
        response = await client.post(GENERATE, json=body)
        assert response.status_code == 200, response.text
        whole: dict[str, Any] = response.json()
        return whole


async def openai_whole(server: RunningServer, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as client:
        response = await client.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        whole: dict[str, Any] = response.json()
        return whole


async def grpc_whole(server: RunningServer, prompt: str) -> list[Any]:
    """A non-streaming request over Triton's gRPC stream (one final response)."""
    sampling = {"max_tokens": MAX_TOKENS, "ignore_eos": True}
    request = vllm_request(
        prompt,
        "whole",
        False,
        sampling,
        "smollm2",
        exclude_input_in_output=True,
        outputs=None,
        return_num_output_tokens=True,
    )
    async with triton_grpc_aio.InferenceServerClient(url=server.grpc_url) as client:
        return await aio_stream_results(client, [request])


async def openai_chat_stream(server: RunningServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed chat completion's events (the usage event last)."""
    async with (
        httpx.AsyncClient(base_url=server.base_url, timeout=600) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        return [
            json.loads(line.removeprefix("data: "))
            async for line in response.aiter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]


def uninterrupted(server: RunningServer, protocol: str, ask: Ask) -> str:
    async def one() -> Outcome:
        async with Traffic(Servers(server.base_url, server.grpc_url)) as traffic:
            return await traffic.send(protocol, ask)

    outcome = asyncio.run(one())
    assert outcome.completed and outcome.tokens == ask.max_tokens
    return outcome.text


def whole_requests(server: RunningServer) -> list[Awaitable[Any]]:
    """Requests beside the streams: n = 2 whole (Triton HTTP, OpenAI), non-streaming gRPC,
    and an OpenAI chat stream with n = 2."""
    n2 = {"max_tokens": MAX_TOKENS, "ignore_eos": True, "n": 2}
    return [
        triton_whole(
            server,
            {"text_input": CHAT_PROMPT, "return_num_output_tokens": True, "parameters": n2},
        ),
        openai_whole(server, {"model": "smollm2", "prompt": RAW_PROMPT, **n2}),
        grpc_whole(server, CHAT_PROMPT),
        openai_chat_stream(
            server,
            {
                "model": "smollm2",
                "messages": [{"role": "user", "content": RAW_PROMPT}],
                **n2,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
    ]


def check_whole(triton: Any, openai: Any, grpc_final: Any, chat_events: Any) -> None:
    """Each request of `whole_requests` got all its tokens, with no error."""
    assert triton["num_output_tokens"] == [MAX_TOKENS, MAX_TOKENS]
    assert openai["usage"]["completion_tokens"] == 2 * MAX_TOKENS
    assert [c["finish_reason"] for c in openai["choices"]] == ["length", "length"]
    assert all(error is None for _, error in grpc_final)
    (final,) = [result for result, _ in grpc_final]
    assert int(final.as_numpy("num_output_tokens")[0]) == MAX_TOKENS and is_final(final)
    assert not any("error" in event for event in chat_events)
    assert chat_events[-1]["usage"]["completion_tokens"] == 2 * MAX_TOKENS
    reasons = {
        choice["index"]: choice["finish_reason"]
        for event in chat_events
        for choice in event.get("choices", [])
        if choice.get("finish_reason")
    }
    assert reasons == {0: "length", 1: "length"}


def test_requests_finish_whole_through_a_killed_engine_core(
    server: RunningServer, http: httpx.Client
) -> None:
    greedy = {p: Ask(prompt_of(p), MAX_TOKENS, temperature=0) for p in ("sse", "openai")}
    expected = {p: uninterrupted(server, p, ask) for p, ask in greedy.items()}
    asks = [("openai", greedy["openai"])]
    asks += [("openai", Ask(f"{i}. {RAW_PROMPT}", MAX_TOKENS)) for i in range(7)]
    asks += [
        ("sse", greedy["sse"]),
        ("sse", Ask(CHAT_PROMPT, MAX_TOKENS)),
        ("sse", Ask(f"1. {CHAT_PROMPT}", MAX_TOKENS)),
    ]
    asks += [("grpc", Ask(f"{i}. {CHAT_PROMPT}", MAX_TOKENS)) for i in range(5)]
    migrated = scrape(http).get("server_requests_migrated_total", 0.0)
    killed: list[psutil.Process] = []
    outcomes, whole = asyncio.run(
        while_streaming(
            server,
            asks,
            lambda: killed.append(kill(engine_core(server))),
            whole_requests(server),
        )
    )
    for (protocol, _), outcome in zip(asks, outcomes, strict=False):
        assert (outcome.error, outcome.tokens, outcome.finish_reason) == (
            None,
            MAX_TOKENS,
            "length",
        ), protocol
    assert outcomes[0].text == expected["openai"] and outcomes[8].text == expected["sse"]
    check_whole(*whole)
    metrics = scrape(http)
    assert metrics["server_engine_restarts_total"] == 1
    assert metrics["server_requests_migrated_total"] - migrated >= len(asks)
    assert not killed[0].is_running()
    cores = [
        p
        for p in psutil.Process(server.process.pid).children(recursive=True)
        if "EngineCore" in p.name()
    ]
    assert len(cores) == 1


def kill(process: psutil.Process) -> psutil.Process:
    process.kill()
    return process


def test_a_stopped_engine_core_is_replaced_after_the_stall_time_and_its_streams_resume(
    server: RunningServer, http: httpx.Client
) -> None:
    asks = [(p, Ask(prompt_of(p), MAX_TOKENS)) for p in ("sse", "grpc", "openai")]
    asks += [(p, Ask(prompt_of(p), MAX_TOKENS, lora="doc")) for p in ("sse", "grpc", "openai")]
    stopped: list[tuple[psutil.Process, float]] = []

    def stop() -> None:
        core = engine_core(server)
        core.suspend()
        stopped.append((core, time.monotonic()))

    outcomes, _ = asyncio.run(while_streaming(server, asks, stop))
    assert [(o.error, o.tokens, o.finish_reason) for o in outcomes] == [
        (None, MAX_TOKENS, "length")
    ] * len(asks)
    core, at = stopped[0]
    assert not core.is_running()
    assert scrape(http)["server_engine_restarts_total"] == 2
    verdict = re.search(
        r"it has made no progress for (\d+) s with requests pending", server.log_path.read_text()
    )
    assert verdict is not None and int(verdict.group(1)) >= STALL_SECONDS
    assert min(o.end for o in outcomes) - at > STALL_SECONDS


LONG_STREAM = 1500
"""Tokens of a stream that outlives two engine restarts."""
SURVIVOR_STREAM = 200
"""Tokens of a stream started between the deaths: still running at the second, which comes as
soon as it has produced a token, and then finished on the third engine."""
ENGINE_FAULT = "The engine failed twice while running this request"


async def started(traffic: Traffic, asks: list[tuple[str, Ask]]) -> list[asyncio.Task[Outcome]]:
    """The streams sent, once each has produced a token."""
    first = len(traffic.live)
    streams = [asyncio.create_task(traffic.send(protocol, ask)) for protocol, ask in asks]

    def each_produced_a_token() -> bool:
        # the tasks register their outcomes once they run: until then there is none to check
        mine = traffic.live[first:]
        return len(mine) == len(asks) and all(o.tokens for o in mine)

    await until(each_produced_a_token, "the streams did not start")
    return streams


async def until(condition: Callable[[], bool], failure: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.1)


async def two_deaths(
    server: RunningServer, http: httpx.Client
) -> tuple[list[Outcome], list[Outcome]]:
    """Streams at both deaths (resumed after the first), and streams started between."""
    asks = [(p, Ask(prompt_of(p), LONG_STREAM)) for p in ("sse", "grpc", "openai")]
    survivor_asks = [(p, Ask(prompt_of(p), SURVIVOR_STREAM)) for p, _ in asks]
    restarts = scrape(http)["server_engine_restarts_total"]
    async with Traffic(Servers(server.base_url, server.grpc_url), timeout=900) as traffic:
        doomed = await started(traffic, asks)
        kill(engine_core(server))
        await until(
            lambda: scrape(http)["server_engine_restarts_total"] > restarts,
            "the engine was not replaced",
        )
        tokens = [o.tokens for o in traffic.live]
        await until(
            lambda: all(o.tokens > t for o, t in zip(traffic.live, tokens, strict=True)),
            "the streams did not resume on the replacement",
        )
        survivors = await started(traffic, survivor_asks)
        kill(engine_core(server))
        return list(await asyncio.gather(*doomed)), list(await asyncio.gather(*survivors))


def test_a_request_running_at_two_engine_deaths_in_a_row_ends_with_an_engine_fault(
    server: RunningServer, http: httpx.Client
) -> None:
    restarts = scrape(http)["server_engine_restarts_total"]
    doomed, survivors = asyncio.run(two_deaths(server, http))
    for outcome in doomed:
        assert outcome.finish_reason is None and ENGINE_FAULT in str(outcome.error), outcome
    assert [(o.error, o.tokens, o.finish_reason) for o in survivors] == [
        (None, SURVIVOR_STREAM, "length")
    ] * 3
    assert scrape(http)["server_engine_restarts_total"] == restarts + 2
    assert http.get("/v2/health/ready").status_code == 200


def test_once_restarts_are_spent_requests_end_with_the_error_and_liveness_fails(
    server: RunningServer, http: httpx.Client
) -> None:
    asks = [(p, Ask(prompt_of(p), 1000)) for p in ("sse", "grpc", "openai")]
    outcomes, _ = asyncio.run(while_streaming(server, asks, lambda: kill(engine_core(server))))
    errors = {o.protocol: (o.finish_reason, o.error) for o in outcomes}
    assert errors["sse"] == (None, UNHEALTHY) and errors["grpc"][0] is None, errors
    assert UNHEALTHY in str(errors["grpc"][1]), errors
    # OpenAI: an error frame for the dead engine (vLLM's words or the backend's), as before
    reason, error = errors["openai"]
    assert reason is None and any(
        text in str(error) for text in (UNHEALTHY, "EngineCore encountered an issue")
    )
    assert wait_for(lambda: http.get("/v2/health/live").status_code == 503, 60)
    assert http.get("/v2/health/ready").status_code == 503
    assert http.post(GENERATE, json={"text_input": "x"}).json() == {"error": UNHEALTHY}
