"""The GPU run's C = 1 level taken interleaved (bench/gpu/loadgen.py, levels.py, run.py), its
profile from vLLM's own timings, the null comparison and ours with the `vllm:` metrics on."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.paths import PROJECT_ROOT
from bench.gpu.table import checks, load, render
from tests.unit.test_gpu_bench import record

RUNS = PROJECT_ROOT / "bench" / "gpu"
"""The raw figures of every recorded GPU run."""
README = PROJECT_ROOT / "README.md"


def sse_stream(request: httpx.Request) -> httpx.Response:
    """A server of either kind streaming three tokens: Triton's generate_stream or OpenAI's."""
    if request.url.path.endswith("/generate_stream"):
        events = [{"text_output": word} for word in ("a", "b", "c")]
        return httpx.Response(200, content="".join(f"data: {json.dumps(e)}\n\n" for e in events).encode())
    events = [json.dumps({"choices": [{"text": word}]}) for word in ("a", "b", "c")] + ["[DONE]"]
    return httpx.Response(200, content="".join(f"data: {e}\n\n" for e in events).encode())


async def test_the_interleaved_c1_level_takes_every_server_in_turn(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "bench" / "gpu"))
    from bench.gpu import loadgen

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.url.port}{request.url.path}")
        return sse_stream(request)

    targets = [{"name": "ours4", "kind": "triton", "url": "http://127.0.0.1:8020"},
               {"name": "vllm1", "kind": "openai", "url": "http://127.0.0.1:8000"}]
    args = argparse.Namespace(raw=str(tmp_path / "tiny-interleaved-c1"), tokens=3, model="tiny", prompt="p",
                              triton_params="{}", start_at=0.0, wid_base=0, target=None)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        results = await loadgen.run_interleaved(client, {}, targets, 3, args)
    ours, vllm = "8020/v2/models/tiny/generate_stream", "8000/v1/completions"
    assert seen == [ours, vllm] + [ours, vllm, vllm, ours, ours, vllm]  # warm-up, then each first in turn
    assert {name: (r["requests"], r["errors"], r["empty_events"]) for name, r in results.items()} == {
        "ours4": (3, 0, 0), "vllm1": (3, 0, 0)}
    raw = json.loads((tmp_path / "tiny-interleaved-c1.vllm1.json").read_text())
    assert raw["done"] == 3 and len(raw["itl"]) == 6 and raw["busy_s"] == pytest.approx(results["vllm1"]["wall_s"], abs=1e-3)


def test_an_interleaved_run_measures_c1_first_in_each_round_and_the_rest_per_server(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import run

    calls: list[tuple] = []
    servers = {name: run.Server(name, None, 0, name, "triton") for name in ("vllm1", "ours4")}  # type: ignore[arg-type]
    started: list[dict] = []
    monkeypatch.setattr(run.Run, "start_all", lambda self, shape, names, args, with_engine: started.append(args)
                        or (servers, None))
    monkeypatch.setattr(run, "stop", lambda process: None)
    monkeypatch.setattr(run, "run_interleaved", lambda group, shape, requests, raw_dir, tokens: calls.append(
        ("interleaved", [s.target for s in group], requests)) or {s.target: {"c": 1, "tok_s": 1.0} for s in group})
    monkeypatch.setattr(run, "run_level", lambda server, shape, c, requests, *rest: calls.append(
        (server.target, c, requests)) or {"c": c, "tok_s": 1.0})
    bench = run.Run(tmp_path, tmp_path, tmp_path, [(1, 24, 1), (256, 8, 8)], 4)
    bench.together("tiny", ["vllm1", "ours4"], rounds=2, profile=False, interleave=True)
    assert calls == [("interleaved", ["vllm1", "ours4"], 24), ("vllm1", 256, 8), ("ours4", 256, 8),
                     ("interleaved", ["ours4", "vllm1"], 24), ("ours4", 256, 8), ("vllm1", 256, 8)]
    rows = [json.loads(line) for line in bench.results.read_text().splitlines()]
    assert [(r["target"], r["round"], r["c"]) for r in rows][:3] == [("vllm1", 0, 1), ("ours4", 0, 1), ("vllm1", 0, 256)]
    # every target the same KV cache, whatever the others took while it started
    assert started[0]["kv_cache_memory_bytes"] == 4 * 2**30 and started[0]["gpu_memory_utilization"] == 0.42


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
        lines += ["# TYPE vllm:generation_tokens counter", f'vllm:generation_tokens_total{{model_name="tiny"}} {3 * served[0]}']
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
            event = {"text_output": word} if "generate_stream" in self.path else {"choices": [{"text": word}]}
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\\n\\n")
            self.wfile.flush()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_an_interleaved_level_gives_each_server_its_own_figures(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import levels
    from bench.gpu.run import Server

    monkeypatch.setattr(levels, "INTERLEAVED_START_DELAY", 3.0)
    script = tmp_path / "fake_sse_server.py"
    script.write_text(FAKE_SSE_SERVER)
    servers = []
    for name, kind, metrics in (("vllm1", "openai", ["--metrics"]), ("ours4", "triton", [])):
        process = subprocess.Popen([sys.executable, str(script), *metrics], stdout=subprocess.PIPE, text=True)
        servers.append(Server(name, process, int(process.stdout.readline()), "", kind))  # type: ignore[union-attr]
    try:
        found = levels.run_interleaved(servers, "tiny", 4, tmp_path, 3)
    finally:
        for server in servers:
            server.process.kill()
            server.process.wait()
    assert set(found) == {"vllm1", "ours4"}
    for level in found.values():
        assert (level["c"], level["requests"], level["errors"], level["interleaved"]) == (1, 4, 0, True)
        assert level["tok_s"] > 0 and level["ttft_p50_ms"] >= 0 and "machine_busy_cpus" in level
        assert level["ttft_mean_ms"] >= 0 and level["itl_mean_ms"] >= 0 and level["e2e_mean_ms"] > 0
    # vLLM's own timings of the 4 measured requests (not the warm-up's), where the server has them
    assert found["vllm1"]["server_ms"] == {"ttft": 10.0, "queue": 1.0, "prefill": 5.0, "decode": 20.0, "e2e": 30.0,
                                           "decode_per_token": 10.0}
    assert "server_ms" not in found["ours4"]


def test_the_interleaved_run_renders_as_the_readme_table() -> None:
    records = load(RUNS / "h100-2026-11-24-interleaved.jsonl")
    table = render(records)
    rows = ["| 1b | 256 | 28,548 | 25,745 | 13,142 | 22,815 | 1.96 | 1.13 | 0.90 |",
            "| tiny | 1 | 416 | 428 | 450 | 441 | 0.95 | 0.97 | 1.03 |"]
    assert all(row in table for row in rows) and "Checks: 20 of 26 met" in table
    assert "against vllm serve (the same code for a lone request, so the noise between engine instances): 0 of 6 met" in table
    found = {check.what: check for check in checks(records)}
    assert all(check.met for what, check in found.items() if "C=1 " not in what)
    readme = README.read_text()
    assert all(row in readme for row in rows)


@pytest.mark.parametrize(("run", "met", "row"), [
    ("I", 24, "| 1b | 256 | 29,951 | 28,114 | 13,571 | 27,243 | 2.07 | 1.03 | 0.94 |"),
    ("J", 21, "| tiny | 64 | 14,313 | 14,669 | 12,368 | 14,137 | 1.19 | 1.04 | 1.02 |"),
])
def test_runs_i_and_j_render_as_the_readme_says(run: str, met: int, row: str) -> None:
    table = render(load(RUNS / f"h100-2026-11-24-run-{run.lower()}.jsonl"))
    assert row in table and f"Checks: {met} of 26 met" in table
    readme = README.read_text()
    assert f"| {run} {row}" in readme and "run I 24 of 26, run J 21 of 26" in readme


def test_vllm_against_itself_meets_the_c1_checks_as_often_as_ours() -> None:
    from bench.gpu.table import lone_request_checks

    met = {"ours4": [0, 0], "vllm4": [0, 0]}
    for path in sorted(RUNS.glob("h100-*.jsonl")):
        for target, counts in met.items():
            found = lone_request_checks(load(path), target)
            counts[0] += sum(check.met for check in found)
            counts[1] += len(found)
    assert met == {"ours4": [52, 96], "vllm4": [45, 93]}
    assert "**45 of 93** over every recorded run (ours: **52 of\n96**)" in README.read_text()


def test_the_null_comparison_takes_vllm_serve_as_the_bound() -> None:
    from bench.gpu.table import lone_request_checks

    records = [record("vllm1", 1, 100, itl=4, ttft=16), record("vllm4", 1, 101, itl=5, ttft=15), record("ours4", 1, 99)]
    found = {check.what: check.met for check in lone_request_checks(records, "vllm4")}
    assert found == {"tiny C=1 vllm4 tok/s / vllm serve": True, "tiny C=1 vllm4 ITL p99 ms vs vllm serve": False,
                     "tiny C=1 vllm4 TTFT p50 ms vs vllm serve": True}
    assert lone_request_checks(records, "vllm1") == [] and "2 of 3 met" in render(records)


def test_vllm_timings_are_means_between_two_readings_summed_over_label_sets() -> None:
    from bench.gpu.probes import server_latency_ms

    before = {"ttft_sum": 1.0, "ttft_count": 10, "decode_sum": 2.0, "decode_count": 10, "tokens": 1280}
    after = {"ttft_sum": 1.15, "ttft_count": 20, "decode_sum": 4.54, "decode_count": 20, "tokens": 2560}
    assert server_latency_ms(before, after) == {"ttft": 15.0, "decode": 254.0, "decode_per_token": 2.0}
    assert server_latency_ms({}, {}) == {} and server_latency_ms(before, before) == {}


def lone(target: str, tok_s: float, ttft: float, server: dict | None = None) -> dict:
    level = {**record(target, 1, tok_s, ttft=ttft), "interleaved": True, "round": 0,
             "ttft_mean_ms": ttft, "itl_mean_ms": 2.0, "e2e_mean_ms": 270.0}
    return {**level, "server_ms": server} if server else level


def test_the_lone_request_profile_splits_ttft_between_the_frontend_and_the_engine() -> None:
    from bench.gpu.table import lone_request_profile

    timings = {"ttft": 9.5, "queue": 0.1, "prefill": 6.0, "decode_per_token": 1.95, "e2e": 262.0}
    records = [lone("vllm1", 450, 14.0, timings), lone("ours4m", 455, 13.0, {**timings, "ttft": 9.0}),
               lone("ours4", 452, 13.5), record("vllm1", 256, 12000)]
    lines = lone_request_profile(records)
    assert "| tiny | vllm1 | 450 | 14.00 / 9.50 | 4.50 | 0.10 | 6.00 | 1.950 | 2.000 | 270.0 / 262.0 |" in lines
    assert "| tiny | ours4m | 455 | 13.00 / 9.00 | 4.00 | 0.10 | 6.00 | 1.950 | 2.000 | 270.0 / 262.0 |" in lines
    assert "| tiny | ours4 | 452 | 13.50 / – | – | – | – | – | 2.000 | 270.0 / – |" in lines
    assert lone_request_profile([lone("ours4", 452, 13.5)]) == []


def test_ours_with_the_vllm_metrics_on_is_checked_as_ours_is() -> None:
    records = [record("vllm1", 256, 10000), record("vllm4", 256, 20000), record("engine", 256, 22000),
               record("ours4", 256, 21000), record("ours4m", 256, 19000)]
    assert all(check.met for check in checks(records))
    with_metrics = {check.what: check.met for check in checks(records, "ours4m")}
    assert with_metrics["tiny C=256 tok/s ours / vllm serve with 4 API processes"] is False
    table = render(records)
    assert "With the vllm: metrics on (ours4m): checks 3 of 5 met" in table
    assert "- tiny C=256: 19,000 tok/s, 0.90 × ours4 without them" in table


def test_an_ours_target_with_an_m_turns_the_vllm_metrics_on(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import run

    launched: list[dict] = []
    monkeypatch.setattr(run.subprocess, "Popen", lambda argv, **kw: launched.append(kw["env"]))
    for target in ("ours4m", "ours2"):
        run.start_server(target, tmp_path, "tiny", tmp_path / f"{target}.log")
    assert [(env["FRONTEND_PROCESSES"], env["REPORT_CUSTOM_METRICS"]) for env in launched] == [("4", "true"), ("2", "false")]


def test_the_run_with_equal_kv_caches_renders_as_the_readme_table() -> None:
    records = load(RUNS / "h100-2026-11-24-equal-kv.jsonl")
    table = render(records)
    rows = ["| 1b | 256 | 24,228 | 21,817 | 10,203 | 21,569 | 2.14 | 1.01 | 0.90 |",
            "| tiny | 64 | 11,994 | 10,615 | 12,367 | 11,070 | 0.86 | 0.96 | 0.89 |"]
    assert all(row in table for row in rows) and "Checks: 22 of 26 met" in table
    assert all(check.met for check in checks(records) if check.what.startswith("1b "))
    readme = README.read_text()
    assert all(row in readme for row in rows) and "Checks: **22 of 26 met**" in readme


def test_the_lone_request_profile_of_the_metrics_on_run_is_the_readmes() -> None:
    from bench.gpu.table import lone_request_profile

    lines = lone_request_profile(load(RUNS / "h100-2026-11-24-metrics-on-2.jsonl"))
    assert "| 1b | ours4m | 419 | 18.19 / 13.22 | 4.97 | 0.03 | 10.64 | 2.325 | 2.339 | 311.6 / 308.0 |" in lines
    assert "| 1b | vllm1 | 388 | 16.55 / 13.87 | 2.68 | 0.04 | 10.13 | 2.486 | 2.495 | 332.1 / 329.1 |" in lines
    readme = README.read_text()
    assert "| 1b | ours, metrics on | 419 | 18.19 / 13.22 | 4.97 | 0.03 | 10.64 | 2.325 | 2.339 | 311.6 / 308.0 |" in readme
