"""The GPU run's gRPC target (`oursNg`): ours driven over Triton's ModelStreamInfer, a call
per request, beside the SSE targets (bench/gpu/loadgen.py, run.py, table.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import grpc
import grpc.aio
import httpx
from tritonclient.grpc import service_pb2, service_pb2_grpc

from app.paths import PROJECT_ROOT
from bench.gpu.table import load, render
from tests.unit.test_gpu_bench import record
from tests.unit.test_gpu_lone_request import README, RUNS, sse_stream


class StreamingServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers each ModelStreamInfer request with three text responses, and keeps the
    requests it was sent."""

    def __init__(self) -> None:
        self.requests: list[service_pb2.ModelInferRequest] = []
        self.peers: set[str] = set()

    async def ModelStreamInfer(self, request_iterator, context):  # noqa: N802 - the service's name
        async for request in request_iterator:
            self.requests.append(request)
            self.peers.add(context.peer())
            for word in (b"a", b"b", b"c"):
                response = service_pb2.ModelInferResponse(model_name=request.model_name)
                response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
                response.raw_output_contents.append(len(word).to_bytes(4, "little") + word)
                yield service_pb2.ModelStreamInferResponse(infer_response=response)


def inputs_of(request: service_pb2.ModelInferRequest) -> dict[str, bytes]:
    return {tensor.name: raw for tensor, raw in zip(request.inputs, request.raw_input_contents)}


async def test_the_grpc_kind_streams_each_request_as_its_own_call_beside_sse_targets(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen

    servicer = StreamingServicer()
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{port}"
    targets = [{"name": "ours4g", "kind": "grpc", "url": address},
               {"name": "ours4", "kind": "triton", "url": "http://127.0.0.1:8020"}]
    args = argparse.Namespace(raw=str(tmp_path / "tiny-interleaved-c1"), tokens=3, model="tiny", prompt="p",
                              triton_params='{"top_k": 1}', start_at=0.0, wid_base=0, target=None)
    channels = {address: loadgen.GrpcChannels(address, 1)}
    try:
        await channels[address].ready()
        async with httpx.AsyncClient(transport=httpx.MockTransport(sse_stream)) as client:
            results = await loadgen.run_interleaved(client, channels, targets, 3, args)
    finally:
        await channels[address].close()
        await server.stop(None)
    assert {name: (r["requests"], r["errors"], r["empty_events"], r["events"]) for name, r in results.items()} == {
        "ours4g": (3, 0, 0, 9), "ours4": (3, 0, 0, 9)}
    assert len(servicer.requests) == 4  # the warm-up's and the level's, a call each
    sent = inputs_of(servicer.requests[-1])
    assert servicer.requests[-1].model_name == "tiny"
    assert sent["text_input"][4:].decode() == "p (worker 0, request 2)"
    assert json.loads(sent["sampling_parameters"][4:]) == {"max_tokens": 3, "ignore_eos": True, "temperature": 0,
                                                            "top_k": 1}
    assert (sent["stream"], sent["exclude_input_in_output"]) == (b"\x01", b"\x01")


async def test_a_grpc_call_that_fails_counts_as_an_error(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen

    args = argparse.Namespace(tokens=3, triton_params="{}")
    out = loadgen.new_out()
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # nothing listens there
    try:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        await loadgen.grpc_request(stub, "tiny", "p", args, out)
    finally:
        await channel.close()
    assert (out["errors"], out["done"]) == (1, 0) and "UNAVAILABLE" in out["exc"]


def test_an_ours_target_with_a_g_listens_for_grpc_and_is_driven_there(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import run

    launched: list[dict] = []
    monkeypatch.setattr(run.subprocess, "Popen", lambda argv, **kw: launched.append(kw["env"]))
    grpc_server = run.start_server("ours4g", tmp_path, "tiny", tmp_path / "ours4g.log", port=8020)
    sse_server = run.start_server("ours4", tmp_path, "tiny", tmp_path / "ours4.log", port=8010)
    assert [(env["FRONTEND_PROCESSES"], env["GRPC_PORT"], env["REPORT_CUSTOM_METRICS"]) for env in launched] == [
        ("4", "8021", "false"), ("4", "0", "false")]
    assert (grpc_server.kind, grpc_server.load_url, grpc_server.url) == ("grpc", "127.0.0.1:8021", "http://127.0.0.1:8020")
    assert (sse_server.kind, sse_server.load_url) == ("triton", "http://127.0.0.1:8010")


def test_ours_over_grpc_is_checked_as_ours_is_and_set_beside_ours_over_sse() -> None:
    records = [record("vllm1", 256, 10000), record("vllm4", 256, 20000), record("engine", 256, 22000),
               record("ours4", 256, 21000, ttft=45.0), record("ours4g", 256, 23100, itl=9.0, ttft=40.0)]
    table = render(records)
    assert "Checks: 5 of 5 met" in table
    assert "Over Triton's gRPC (ModelStreamInfer, a call per request) (ours4g): checks 5 of 5 met" in table
    assert ("- tiny C=256: 23,100 tok/s, 1.10 × ours4; TTFT p50 40.0 ms (ours4 45.0), ITL p99 9.0 ms (ours4 10.0)"
            in table)


async def test_each_worker_streams_over_a_connection_of_its_own(monkeypatch) -> None:
    """The kernel spreads connections, not streams, over a server's frontend processes: each
    worker's channel must be its own connection, though gRPC shares one between equal channels."""
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen

    servicer = StreamingServicer()
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    channels = loadgen.GrpcChannels(address, 4)
    args = argparse.Namespace(tokens=3, triton_params="{}")
    try:
        await channels.ready()
        for wid in range(8):
            await loadgen.grpc_request(channels.stub(wid), "tiny", "p", args, loadgen.new_out())
    finally:
        await channels.close()
        await server.stop(None)
    assert len(servicer.requests) == 8 and len(servicer.peers) == 4


def test_run_k_renders_as_the_readme_says() -> None:
    table = render(load(RUNS / "h100-2026-11-24-run-k.jsonl"))
    row = "| 1b | 64 | 15,467 | 15,545 | 12,247 | 13,604 | 1.27 | 1.14 | 1.01 |"
    assert row in table and "Checks: 23 of 26 met" in table
    assert "- NOT met: tiny C=1 tok/s ours / vllm serve: 1.0 (bound 1.0)" in table
    assert "(ours4g): checks 18 of 26 met" in table and "- 1b C=64: 13,962 tok/s, 0.90 × ours4" in table
    readme = README.read_text()
    assert row in readme and "Checks: **23 of 26 met**" in readme


def test_the_grpc_follow_up_of_run_k_renders_as_the_readme_says() -> None:
    table = render(load(RUNS / "h100-2026-11-24-run-k-grpc.jsonl"))
    assert "- 1b C=64: 15,728 tok/s, 1.18 × ours4; TTFT p50 35.5 ms (ours4 45.0)" in table
    assert "| tiny | 256 | – | 22,563 | – | 22,113 | – | 1.02 |" in table
    assert "| 1b | 64 | 13,316 | 15,728 | 13,471 | 1.18 |" in README.read_text()


def test_make_bench_on_a_gpu_runs_ours_over_grpc_too(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import run

    ran: list[list[str]] = []
    monkeypatch.setattr(run.Run, "one_by_one", lambda self, shape, targets: ran.append(targets))
    monkeypatch.setattr(run, "load", lambda path: [])
    monkeypatch.setattr(sys, "argv", ["run.py", "--models", str(tmp_path), "--out", str(tmp_path / "out"),
                                      "--shapes", "smollm2", "--processes", "4"])
    run.main()
    assert ran == [["engine", "vllm1", "vllm4", "ours4", "ours4g"]]
