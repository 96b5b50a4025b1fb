"""Disconnects, graceful drain and engine-side limits against the real engine."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import signal
import threading
import time
from typing import Any

import httpx
import psutil
import pytest
import tritonclient.grpc as triton_grpc

from tests.integration.test_metrics_and_health import scrape
from tests.support.servers import (
    CONTEXT_TOKENS,
    RunningServer,
    seconds_per_token,
    start_server,
    tokens_for,
)
from tests.support.sse import StreamReader
from tests.support.triton_grpc import is_final, vllm_request
from tests.support.waiting import wait_for

GENERATE = "/v2/models/smollm2/generate"
STREAM = "/v2/models/smollm2/generate_stream"
LONG = {"max_tokens": 1500, "ignore_eos": True}
SHUTDOWN_MESSAGE = "Request aborted: the server is shutting down"
SHUTDOWN_GRPC = "GRPC server is shutting down and has stopped accepting new requests."


def load(http: httpx.Client) -> tuple[float, float]:
    """(requests this server holds, requests the engine holds) for smollm2."""
    values = scrape(http)
    return values["server_requests_in_flight"], values["server_engine_requests_unfinished"]


def rss_mib(server: RunningServer) -> float:
    """Resident memory of the server and its engine-core process."""
    process = psutil.Process(server.process.pid)
    rss: int = sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
    return rss / 2**20


async def drop_after_two_events(client: httpx.AsyncClient, index: int) -> None:
    body = {"text_input": f"Tell story number {index}.", "parameters": LONG}
    async with client.stream("POST", STREAM, json=body) as response:
        assert response.status_code == 200
        events = 0
        async for line in response.aiter_lines():
            events += line.startswith("data: ")
            if events == 2:
                return
    raise AssertionError("the stream ended before two events")


def drop_streams(base_url: str, first: int, count: int) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
            await asyncio.gather(*(drop_after_two_events(client, first + i) for i in range(count)))

    asyncio.run(run())


def test_dropped_streams_are_aborted_in_the_engine(
    server: RunningServer, http: httpx.Client
) -> None:
    """200 streams dropped after two events, 20 at a time: after each round the engine holds
    no request within 2 s, generates nothing more, and memory does not grow."""
    memory = []
    for round_index in range(10):
        drop_streams(server.base_url, round_index * 20, 20)
        assert wait_for(lambda: load(http) == (0, 0), 30), (
            f"round {round_index}: still running {load(http)}"
        )
        memory.append(rss_mib(server))
    generated = scrape(http)["vllm:generation_tokens_total"]
    time.sleep(1.0)
    assert scrape(http)["vllm:generation_tokens_total"] == generated
    # the first rounds warm caches and allocator arenas; after that no growth
    assert memory[-1] - memory[2] < 64, f"RSS per round (MiB): {[round(m) for m in memory]}"


def test_non_streaming_client_timeout_aborts_the_engine_request(
    server: RunningServer, http: httpx.Client
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{server.base_url}{GENERATE}",
            json={"text_input": "Go on.", "parameters": LONG},
            timeout=1.5,
        )
    assert wait_for(lambda: load(http) == (0, 0), 30), load(http)


def grpc_request(prompt: str, request_id: str, max_tokens: int) -> dict[str, Any]:
    return vllm_request(
        prompt,
        request_id,
        True,
        {"max_tokens": str(max_tokens), "ignore_eos": "true"},
        "smollm2",
        exclude_input_in_output=True,
        outputs=None,
        return_num_output_tokens=True,
    )


class GrpcStreams:
    """A gRPC stream running a request of `tokens` tokens, and a second client for a late
    stream."""

    SHUTTING_DOWN = ("StatusCode.UNAVAILABLE", SHUTDOWN_GRPC)

    def __init__(self, server: RunningServer, tokens: int) -> None:
        self.tokens = tokens
        self.running = triton_grpc.InferenceServerClient(server.grpc_url)
        self.late = triton_grpc.InferenceServerClient(server.grpc_url)
        self.received: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.refused: list[Any] = []
        self.ended_at = 0.0

    def start(self) -> None:
        """Start the running request; return once its first response came."""
        self.running.start_stream(self.arrived)
        self.running.async_stream_infer(**grpc_request("Tell a story.", "running", self.tokens))
        self.results = [self.received.get(timeout=60)]

    def arrived(self, result: Any, error: Any) -> None:
        """The stream's callback: each response, and when the last came."""
        self.ended_at = time.monotonic()
        self.received.put((result, error))

    def try_a_late_stream(self) -> None:
        self.late.start_stream(lambda result, error: self.refused.append(error))
        with contextlib.suppress(triton_grpc.InferenceServerException):
            self.late.async_stream_infer(**grpc_request("Hi", "late", 4))
        self.late.stop_stream()

    def finish(self, timeout: float) -> None:
        """Wait for the running request's final response, then close the stream."""
        while not is_final(self.results[-1][0]):
            self.results.append(self.received.get(timeout=timeout))
        self.running.stop_stream()

    def close(self) -> None:
        self.running.close()
        self.late.close()

    def check(self) -> None:
        assert all(error is None for _, error in self.results)
        tokens = sum(int(r.as_numpy("num_output_tokens")[0]) for r, _ in self.results)
        assert tokens == self.tokens
        assert [(e.status(), e.message()) for e in self.refused] == [self.SHUTTING_DOWN]


def start_short_request(http: httpx.Client, tokens: int) -> tuple[threading.Thread, dict[str, Any]]:
    """A non-streaming request of `tokens` tokens in a thread; its response, and when it came."""
    short: dict[str, Any] = {}
    body = {"text_input": "Hi", "parameters": {"max_tokens": tokens, "ignore_eos": True}}

    def run() -> None:
        short["response"] = http.post(GENERATE, json=body)
        short["ended_at"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, short


def drain_for(per_token: float) -> float:
    """A drain period that a stream of CONTEXT_TOKENS tokens surely outlasts on this host (a
    third of its time), 8 s at most, 3 s at least (time for the refused requests)."""
    return round(max(3.0, min(8.0, CONTEXT_TOKENS * per_token / 3)), 1)


def test_sigterm_drains_running_requests_then_exits_zero(server: RunningServer) -> None:
    """On both protocols: in-flight requests finish within the drain period, new ones are
    refused (HTTP 503; a new gRPC stream UNAVAILABLE with Triton's text), the rest end with an
    error event when it runs out; then the engine stops and the process exits 0. The drain
    and the requests are sized to the host's speed (measured on the session server): the
    short requests last about a third of the drain, the long stream (as long as the context
    allows) about three times it or more."""
    per_token = seconds_per_token(server.base_url)
    drain = drain_for(per_token)
    short_tokens = tokens_for(per_token, drain / 3)
    draining = start_server(name="drain", env={"DRAIN_TIMEOUT_SECONDS": str(drain)})
    engine_processes = psutil.Process(draining.process.pid).children(recursive=True)
    http = httpx.Client(base_url=draining.base_url, timeout=60)
    grpc_streams = GrpcStreams(draining, short_tokens)
    try:
        long_body = {
            "text_input": "Tell a long story.",
            "parameters": {"max_tokens": CONTEXT_TOKENS, "ignore_eos": True},
        }
        long_stream = StreamReader(draining.base_url, long_body)
        long_stream.start()
        assert long_stream.first_event.wait(60)
        grpc_streams.start()
        short_request, short = start_short_request(http, short_tokens)
        assert wait_for(lambda: load(http)[0] == 3, 30), load(http)

        draining.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert wait_for(lambda: http.get("/v2/health/ready").status_code == 503, 30)
        refused = http.post(GENERATE, json={"text_input": "Hi"})
        assert refused.status_code == 503 and "error" in refused.json()
        assert http.get("/v2/health/live").status_code == 200
        grpc_streams.try_a_late_stream()
        grpc_streams.finish(drain + 30)
        grpc_streams.check()

        short_request.join(drain + 30)
        assert short["response"].status_code == 200 and short["response"].json()["text_output"]
        # both still ran when the signal came (and ended whole: within the drain)
        assert short["ended_at"] > signalled and grpc_streams.ended_at > signalled
        long_stream.join(drain + 30)
        assert long_stream.events[-1] == {"error": SHUTDOWN_MESSAGE}
        assert drain - 1 <= long_stream.ended_at - signalled <= drain + 10
        assert all("text_output" in event for event in long_stream.events[:-1])

        assert draining.process.wait(timeout=60) == 0, draining.log_tail()
        _, alive = psutil.wait_procs(engine_processes, timeout=10)
        assert not alive, f"engine processes left running: {alive}"
    finally:
        grpc_streams.close()
        http.close()
        if draining.process.poll() is None:
            draining.process.kill()
            draining.process.wait(timeout=30)
