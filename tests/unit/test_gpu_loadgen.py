"""The GPU benchmark's load generator (bench/gpu/loadgen*.py, levels.py, probes.py): the engine's
rounds, the interleaved C = 1 level, ours over gRPC, and vLLM's own timings."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from app.paths import PROJECT_ROOT


def sse_stream(request: httpx.Request) -> httpx.Response:
    """A server of either kind streaming three tokens: Triton's generate_stream or OpenAI's."""
    if request.url.path.endswith("/generate_stream"):
        events = [{"text_output": word} for word in ("a", "b", "c")]
        return httpx.Response(
            200, content="".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()
        )
    chunks = [json.dumps({"choices": [{"text": word}]}) for word in ("a", "b", "c")] + ["[DONE]"]
    return httpx.Response(200, content="".join(f"data: {c}\n\n" for c in chunks).encode())


class StreamingServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers each ModelStreamInfer request with three text responses, and keeps the
    requests it was sent."""

    def __init__(self) -> None:
        self.requests: list[service_pb2.ModelInferRequest] = []
        self.peers: set[str] = set()

    async def ModelStreamInfer(self, request_iterator, context):
        async for request in request_iterator:
            self.requests.append(request)
            self.peers.add(context.peer())
            for word in (b"a", b"b", b"c"):
                response = service_pb2.ModelInferResponse(model_name=request.model_name)
                response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
                response.raw_output_contents.append(len(word).to_bytes(4, "little") + word)
                yield service_pb2.ModelStreamInferResponse(infer_response=response)


def inputs_of(request: service_pb2.ModelInferRequest) -> dict[str, bytes]:
    return {
        tensor.name: raw
        for tensor, raw in zip(request.inputs, request.raw_input_contents, strict=True)
    }


async def test_the_load_generator_runs_every_level_for_each_tag_on_stdin(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen

    async def one_request(wid: int, out: dict[str, Any], count: int, tag: str) -> None:
        for _ in range(count):
            out["ttft"].append(0.01)
            out["itl"].extend([0.002] * 3)
            out["e2e"].append(0.02)
            out["events"] += 4
            out["done"] += 1

    args = argparse.Namespace(
        raw=str(tmp_path / "tiny-engine"), tokens=4, wid_base=0, target="engine"
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO("r0\nr1\n"))
    await loadgen.engine_rounds(None, one_request, [(1, 2), (4, 1)], args)
    assert (tmp_path / "tiny-engine.ready").exists()
    for tag in ("r0", "r1"):
        levels = json.loads((tmp_path / f"tiny-engine.{tag}.json").read_text())
        assert [(level["c"], level["requests"]) for level in levels] == [(1, 2), (4, 4)]
        assert all(set(level["server_cpu_s"]) == {"engine core"} for level in levels)


async def test_the_interleaved_c1_level_takes_every_server_in_turn(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.url.port}{request.url.path}")
        return sse_stream(request)

    targets = [
        {"name": "ours4", "kind": "triton", "url": "http://127.0.0.1:8020"},
        {"name": "vllm1", "kind": "openai", "url": "http://127.0.0.1:8000"},
    ]
    args = argparse.Namespace(
        raw=str(tmp_path / "tiny-interleaved-c1"),
        tokens=3,
        model="tiny",
        prompt="p",
        triton_params="{}",
        start_at=0.0,
        wid_base=0,
        target=None,
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        results = await loadgen.run_interleaved(client, {}, targets, 3, args)
    ours, vllm = "8020/v2/models/tiny/generate_stream", "8000/v1/completions"
    warm_up, turns = [ours, vllm], [ours, vllm, vllm, ours, ours, vllm]  # then each first in turn
    assert seen == [*warm_up, *turns]
    assert {
        name: (r["requests"], r["errors"], r["empty_events"]) for name, r in results.items()
    } == {"ours4": (3, 0, 0), "vllm1": (3, 0, 0)}
    raw = json.loads((tmp_path / "tiny-interleaved-c1.vllm1.json").read_text())
    assert (
        raw["done"] == 3
        and len(raw["itl"]) == 6
        and raw["busy_s"] == pytest.approx(results["vllm1"]["wall_s"], abs=1e-3)
    )


FAKE_SSE_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERIES = {"time_to_first_token": 0.010, "request_queue_time": 0.001, "request_prefill_time": 0.005,
          "request_decode_time": 0.020, "e2e_request_latency": 0.030}
served = [0]

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if "--metrics" not in sys.argv:
            self.send_error(404)
            return
        lines = []
        for name, seconds in SERIES.items():
            lines += [f"# TYPE vllm:{name}_seconds histogram",
                      f'vllm:{name}_seconds_bucket{{model_name="tiny",le="+Inf"}} {served[0]}',
                      f'vllm:{name}_seconds_count{{model_name="tiny"}} {served[0]}',
                      f'vllm:{name}_seconds_sum{{model_name="tiny"}} {seconds * served[0]}']
        lines += ["# TYPE vllm:generation_tokens counter",
                  f'vllm:generation_tokens_total{{model_name="tiny"}} {3 * served[0]}']
        body = ("\\n".join(lines) + "\\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        served[0] += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for word in ("a", "b", "c"):
            if "generate_stream" in self.path:
                event = {"text_output": word}
            else:
                event = {"choices": [{"text": word}]}
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\\n\\n")
            self.wfile.flush()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_an_interleaved_level_gives_each_server_its_own_figures(
    tmp_path: Path, monkeypatch
) -> None:
    from bench.gpu import levels
    from bench.gpu.servers import Server

    monkeypatch.setattr(levels, "INTERLEAVED_START_DELAY", 3.0)
    script = tmp_path / "fake_sse_server.py"
    script.write_text(FAKE_SSE_SERVER)
    servers = []
    for name, kind, metrics in (("vllm1", "openai", ["--metrics"]), ("ours4", "triton", [])):
        process = subprocess.Popen(
            [sys.executable, str(script), *metrics], stdout=subprocess.PIPE, text=True
        )
        assert process.stdout is not None
        servers.append(Server(name, process, int(process.stdout.readline()), "", kind))
    try:
        found = levels.run_interleaved(servers, "tiny", 4, tmp_path, 3)
    finally:
        for server in servers:
            server.process.kill()
            server.process.wait()
            if server.process.stdout is not None:
                server.process.stdout.close()
    assert set(found) == {"vllm1", "ours4"}
    for level in found.values():
        assert (level["c"], level["requests"], level["errors"], level["interleaved"]) == (
            1,
            4,
            0,
            True,
        )
        assert level["tok_s"] > 0 and level["ttft_p50_ms"] >= 0 and "machine_busy_cpus" in level
        assert level["ttft_mean_ms"] >= 0 and level["itl_mean_ms"] >= 0 and level["e2e_mean_ms"] > 0
    # vLLM's own timings of the 4 measured requests (not the warm-up's), where the server has them
    assert found["vllm1"]["server_ms"] == {
        "ttft": 10.0,
        "queue": 1.0,
        "prefill": 5.0,
        "decode": 20.0,
        "e2e": 30.0,
        "decode_per_token": 10.0,
    }
    assert "server_ms" not in found["ours4"]


def test_vllm_timings_are_means_between_two_readings_summed_over_label_sets() -> None:
    from bench.gpu.probes import server_latency_ms

    before = {
        "ttft_sum": 1.0,
        "ttft_count": 10,
        "decode_sum": 2.0,
        "decode_count": 10,
        "tokens": 1280,
    }
    after = {
        "ttft_sum": 1.15,
        "ttft_count": 20,
        "decode_sum": 4.54,
        "decode_count": 20,
        "tokens": 2560,
    }
    assert server_latency_ms(before, after) == {
        "ttft": 15.0,
        "decode": 254.0,
        "decode_per_token": 2.0,
    }
    assert server_latency_ms({}, {}) == {} and server_latency_ms(before, before) == {}


async def test_the_grpc_kind_streams_each_request_as_its_own_call_beside_sse_targets(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen, loadgen_requests

    servicer = StreamingServicer()
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{port}"
    targets = [
        {"name": "ours4g", "kind": "grpc", "url": address},
        {"name": "ours4", "kind": "triton", "url": "http://127.0.0.1:8020"},
    ]
    args = argparse.Namespace(
        raw=str(tmp_path / "tiny-interleaved-c1"),
        tokens=3,
        model="tiny",
        prompt="p",
        triton_params='{"top_k": 1}',
        start_at=0.0,
        wid_base=0,
        target=None,
    )
    channels = {address: loadgen_requests.GrpcChannels(address, 1)}
    try:
        await channels[address].ready()
        async with httpx.AsyncClient(transport=httpx.MockTransport(sse_stream)) as client:
            results = await loadgen.run_interleaved(client, channels, targets, 3, args)
    finally:
        await channels[address].close()
        await server.stop(None)
    assert {
        name: (r["requests"], r["errors"], r["empty_events"], r["events"])
        for name, r in results.items()
    } == {"ours4g": (3, 0, 0, 9), "ours4": (3, 0, 0, 9)}
    assert len(servicer.requests) == 4  # the warm-up's and the level's, a call each
    sent = inputs_of(servicer.requests[-1])
    assert servicer.requests[-1].model_name == "tiny"
    assert sent["text_input"][4:].decode() == "p (worker 0, request 2)"
    assert json.loads(sent["sampling_parameters"][4:]) == {
        "max_tokens": 3,
        "ignore_eos": True,
        "temperature": 0,
        "top_k": 1,
    }
    assert (sent["stream"], sent["exclude_input_in_output"]) == (b"\x01", b"\x01")


async def test_a_grpc_call_that_fails_counts_as_an_error(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen_requests, loadgen_samples

    args = argparse.Namespace(tokens=3, triton_params="{}")
    out = loadgen_samples.new_out()
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # nothing listens there
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        await loadgen_requests.grpc_request(stub, "tiny", "p", args, out)
    finally:
        await channel.close()
    assert (out["errors"], out["done"]) == (1, 0) and "UNAVAILABLE" in out["exc"]


async def test_each_worker_streams_over_a_connection_of_its_own(monkeypatch) -> None:
    """The kernel spreads connections, not streams, over a server's frontend processes: each
    worker's channel must be its own connection, though gRPC shares one between equal channels."""
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen_requests, loadgen_samples

    servicer = StreamingServicer()
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    channels = loadgen_requests.GrpcChannels(address, 4)
    args = argparse.Namespace(tokens=3, triton_params="{}")
    try:
        await channels.ready()
        for wid in range(8):
            await loadgen_requests.grpc_request(
                channels.stub(wid), "tiny", "p", args, loadgen_samples.new_out()
            )
    finally:
        await channels.close()
        await server.stop(None)
    assert len(servicer.requests) == 8 and len(servicer.peers) == 4
