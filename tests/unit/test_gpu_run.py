"""The GPU benchmark's runner (bench/gpu/run.py, servers.py, engine.py, mkmodels.py): targets
started and measured in the right order, the in-process engine kept between rounds, the model
shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest

from app.paths import PROJECT_ROOT
from bench.gpu.engine import EngineSession
from bench.gpu.loadgen import rotated
from bench.gpu.servers import Server

FAKE_ENGINE_LOADGEN = """
import json, os, sys
raw = sys.argv[sys.argv.index("--raw") + 1]
if "--fail" in sys.argv:
    sys.exit(1)
open(raw + ".ready", "w").close()
for line in sys.stdin:
    tag = line.strip()
    with open(raw + "." + tag + ".part", "w") as part:  # then renamed, as loadgen.py does
        json.dump([{"c": 1, "tok_s": 10.0, "tag": tag}], part)
    os.replace(raw + "." + tag + ".part", raw + "." + tag + ".json")
"""


def fake_engine(tmp_path: Path, *extra: str) -> EngineSession:
    script = tmp_path / "fake_loadgen.py"
    script.write_text(FAKE_ENGINE_LOADGEN)
    raw = tmp_path / "tiny-engine"
    return EngineSession.start(
        [sys.executable, str(script), "--raw", str(raw), *extra], raw, tmp_path / "engine.log"
    )


def test_the_engine_of_a_together_run_is_kept_for_every_round(tmp_path: Path) -> None:
    engine = fake_engine(tmp_path)
    try:
        assert engine.wait_ready(timeout=30) < 30
        assert engine.round("r0", timeout=30) == [{"c": 1, "tok_s": 10.0, "tag": "r0"}]
        assert engine.round("r1", timeout=30)[0]["tag"] == "r1"
    finally:
        engine.stop()
    assert engine.process.returncode == 0


def test_an_engine_that_did_not_start_is_reported_and_gives_no_rounds(tmp_path: Path) -> None:
    engine = fake_engine(tmp_path, "--fail")
    with pytest.raises(RuntimeError, match="did not start"):
        engine.wait_ready(timeout=30)
    assert engine.round("r0", timeout=30) == []
    engine.stop()


def test_the_engine_starts_alongside_the_servers_after_the_first(
    tmp_path: Path, monkeypatch
) -> None:
    from bench.gpu import run

    events: list[str] = []
    monkeypatch.setattr(
        "bench.gpu.run.time.sleep", lambda seconds: events.append(f"wait {seconds}")
    )

    def launch(target: str, *args, **kwargs) -> Server:
        events.append(f"launch {target}")
        return Server(target, Mock(spec=subprocess.Popen), 0, target, "triton")

    def ready(url: str, process, start: float) -> float:
        events.append(f"ready {url}")
        return 1.0

    monkeypatch.setattr(run, "start_server", launch)
    monkeypatch.setattr(run, "wait_ready", ready)

    engine_double = Mock(spec=EngineSession)

    def launch_engine(self, shape, args):
        events.append("launch engine")
        return engine_double

    def wait_engine(self, shape, engine):
        events.append("ready engine")
        return engine

    monkeypatch.setattr(run.Run, "launch_engine", launch_engine)
    monkeypatch.setattr(run.Run, "wait_engine", wait_engine)
    bench = run.Run(tmp_path, tmp_path, tmp_path, [(1, 1, 1)], 4)
    servers, engine = bench.start_all("tiny", ["vllm1", "vllm4", "ours4"], {}, with_engine=True)
    gap = f"wait {run.LAUNCH_GAP}"  # engines launched at one moment can race for a port
    assert events == [
        "launch vllm1",
        "ready vllm1",
        "launch vllm4",
        gap,
        "launch ours4",
        gap,
        "launch engine",
        "ready vllm4",
        "ready ours4",
        "ready engine",
    ]
    assert list(servers) == ["vllm1", "vllm4", "ours4"] and engine is engine_double


def test_an_interleaved_run_measures_c1_first_in_each_round_and_the_rest_per_server(
    tmp_path: Path, monkeypatch
) -> None:
    from bench.gpu import run

    calls: list[tuple[object, ...]] = []
    servers = {
        name: Server(name, Mock(spec=subprocess.Popen), 0, name, "triton")
        for name in ("vllm1", "ours4")
    }
    started: list[dict[str, Any]] = []

    def start_all(self, shape, names, args, with_engine):
        started.append(args)
        return servers, None

    monkeypatch.setattr(run.Run, "start_all", start_all)
    monkeypatch.setattr(run, "stop", lambda process: None)

    def run_interleaved(group, shape, requests, raw_dir, tokens):
        calls.append(("interleaved", [s.target for s in group], requests))
        return {s.target: {"c": 1, "tok_s": 1.0} for s in group}

    def run_level(server, shape, c, requests, *rest):
        calls.append((server.target, c, requests))
        return {"c": c, "tok_s": 1.0}

    monkeypatch.setattr(run, "run_interleaved", run_interleaved)
    monkeypatch.setattr(run, "run_level", run_level)
    bench = run.Run(tmp_path, tmp_path, tmp_path, [(1, 24, 1), (256, 8, 8)], 4)
    bench.together("tiny", ["vllm1", "ours4"], rounds=2, profile=False, interleave=True)
    assert calls == [
        ("interleaved", ["vllm1", "ours4"], 24),
        ("vllm1", 256, 8),
        ("ours4", 256, 8),
        ("interleaved", ["ours4", "vllm1"], 24),
        ("ours4", 256, 8),
        ("vllm1", 256, 8),
    ]
    rows = [json.loads(line) for line in bench.results.read_text().splitlines()]
    assert [(r["target"], r["round"], r["c"]) for r in rows][:3] == [
        ("vllm1", 0, 1),
        ("ours4", 0, 1),
        ("vllm1", 0, 256),
    ]
    # every target the same KV cache, whatever the others took while it started
    assert (
        started[0]["kv_cache_memory_bytes"] == 4 * 2**30
        and started[0]["gpu_memory_utilization"] == 0.42
    )


def test_make_bench_on_a_gpu_runs_ours_over_grpc_too(tmp_path: Path, monkeypatch) -> None:
    from bench.gpu import run

    ran: list[list[str]] = []
    monkeypatch.setattr(run.Run, "one_by_one", lambda self, shape, targets: ran.append(targets))
    monkeypatch.setattr(run, "load", lambda path: [])
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "run.py",
            "--models",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--shapes",
            "smollm2",
            "--processes",
            "4",
        ],
    )
    run.main()
    assert ran == [["engine", "vllm1", "vllm4", "ours4", "ours4g"]]


def test_ours_targets_name_their_processes_metrics_and_protocol(
    tmp_path: Path, monkeypatch
) -> None:
    from bench.gpu import servers as gpu_servers

    launched: list[dict[str, str]] = []
    monkeypatch.setattr(
        "bench.gpu.servers.subprocess.Popen", lambda argv, **kw: launched.append(kw["env"])
    )
    servers = [
        gpu_servers.start_server(target, tmp_path, "tiny", tmp_path / f"{target}.log", port=port)
        for target, port in (("ours4g", 8020), ("ours2m", 8010))
    ]
    assert [
        (env["FRONTEND_PROCESSES"], env["GRPC_PORT"], env["REPORT_CUSTOM_METRICS"])
        for env in launched
    ] == [("4", "8021", "false"), ("2", "0", "true")]
    assert [(server.kind, server.load_url) for server in servers] == [
        ("grpc", "127.0.0.1:8021"),
        ("triton", "http://127.0.0.1:8010"),
    ]


def test_rounds_take_the_targets_in_rotated_order() -> None:
    assert rotated(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert rotated(["a", "b", "c"], 4) == ["b", "c", "a"]


def test_the_shapes_are_smollm2_with_another_architecture() -> None:
    from bench.gpu.mkmodels import SHAPES, shape_config

    like = {
        "_model_name_or_path": "somewhere",
        "transformers_version": "5",
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "vocab_size": 49152,
        "eos_token_id": 2,
        "dtype": "bfloat16",
    }
    assert shape_config(like, SHAPES["tiny"]) == {
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "vocab_size": 49152,
        "eos_token_id": 2,
        "dtype": "bfloat16",
    }
    big = shape_config(like, SHAPES["1b"])
    assert (big["hidden_size"], big["num_hidden_layers"], big["num_key_value_heads"]) == (
        2048,
        16,
        8,
    )
    assert (big["vocab_size"], big["eos_token_id"]) == (49152, 2)


def test_a_missing_shape_is_made_with_the_tokenizer_of_the_model_it_is_like(
    tmp_path: Path, monkeypatch
) -> None:
    """A miniature of the shapes, drawn on the CPU: a checkpoint folder vLLM can load."""
    from bench.gpu import mkmodels

    like = PROJECT_ROOT / ".cache" / "models" / "smollm2"
    if not (like / "tokenizer.json").exists():
        pytest.skip("the default model is prepared by `make setup`")
    monkeypatch.setitem(
        mkmodels.SHAPES,
        "tiny",
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
        },
    )
    (tmp_path / "1b").mkdir()
    (tmp_path / "1b" / "config.json").write_text("{}")  # there already: left alone
    mkmodels.ensure_shapes(tmp_path, ["tiny", "1b", "smollm2"], like, device="cpu")
    config = json.loads((tmp_path / "tiny" / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (
        64,
        2,
        49152,
    )
    assert (tmp_path / "tiny" / "model.safetensors").stat().st_size > 0
    assert (tmp_path / "tiny" / "tokenizer.json").read_bytes() == (
        like / "tokenizer.json"
    ).read_bytes()
    assert (tmp_path / "1b" / "config.json").read_text() == "{}" and not (
        tmp_path / "smollm2"
    ).exists()
