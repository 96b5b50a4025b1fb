"""`make bench`'s routing target: prefix-aware against least-loaded routing between two CPU
instances of the model (`instance_group [{ kind: KIND_CPU count: 2 }]`), on shared-prefix
traffic: 8 long distinct prefixes, each asked several questions, in a mixed order.

Our server starts twice, once per routing (config.pbtxt's INSTANCE_ROUTING); each run reports
the time to first token (p50, p99), the engines' prefix-cache hit rate (`vllm:prefix_cache_*`)
and how the requests spread over the instances. The engines' KV cache is bounded (48 blocks of
128 tokens each by default, `--routing-kv-blocks`) so that one instance cannot hold every
prefix, as with real traffic's many more prefixes: what prefix-aware routing is for."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import httpx
from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import model_config_pb2

from app.repository.config_file import CONFIG_FILE
from app.repository.layout import ENGINE_ARGS_FILE, ModelSpec, read_config
from bench.burst import percentile
from bench.progress import Progress
from bench.servers import ServerProcess, free_ports, server_env
from bench.targets import ours_server

ROUTINGS = ("least_loaded", "prefix")
PREFIXES = 8
TOPICS = ("rivers", "volcanoes", "bridges", "orchards", "comets", "glaciers", "markets", "violins")
VOCABULARY = (
    "the a of and water stone light long old early many small great river field city year "
    "people work made found under over between after before during north south east west"
)
QUESTIONS = ("why", "how", "when", "where", "who", "what else", "since when", "how often")


@dataclass(frozen=True)
class RoutingConfig:
    """The traffic of each run (`--routing-*` options)."""

    requests: int = 64
    """In all, each prefix asked as often."""
    concurrency: int = 4
    prefix_words: int = 1000
    """About 1,000 tokens, 8 KV blocks: the 8 prefixes need 64, more than one engine's 48."""
    max_tokens: int = 4
    kv_blocks: int | None = 48
    """`num_gpu_blocks_override` of each engine (None: the KV cache as configured)."""
    double: bool = False
    """The engine double instead of vLLM (the target's smoke test): no prefix cache."""

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> RoutingConfig:
        """From the bench's options (`routing_<field>`; a KV bound of 0: none)."""
        defaults = cls()
        values = {
            f.name: options.get(f"routing_{f.name}", getattr(defaults, f.name)) for f in fields(cls)
        }
        return cls(**{**values, "kv_blocks": values["kv_blocks"] or None})


@dataclass(frozen=True)
class RoutingRun:
    """What one routing got."""

    routing: str
    requests: int
    errors: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    hit_rate: float | None
    """Prefix-cache hits over queries (tokens), both engines (None: no such series)."""
    per_instance: dict[str, int]
    """Requests each instance finished (from its `vllm:` series)."""
    seconds: float


def prefix_text(topic: str, words: int) -> str:
    """A long text of its own about `topic` (its first words set it apart from the others)."""
    rng = random.Random(topic)
    vocabulary = VOCABULARY.split()
    return f"Notes on {topic}: " + " ".join(rng.choice(vocabulary) for _ in range(words)) + "."


def shared_prefix_prompts(config: RoutingConfig) -> list[str]:
    """Every prefix asked `requests / 8` questions, in one mixed order (the same each run)."""
    prefixes = [prefix_text(topic, config.prefix_words) for topic in TOPICS[:PREFIXES]]
    prompts = [
        f"{prefix} Question {n}: {QUESTIONS[n % len(QUESTIONS)]}?"
        for n in range(max(1, config.requests // PREFIXES))
        for prefix in prefixes
    ]
    random.Random(0).shuffle(prompts)
    return prompts


def routing_repository(model_dir: Path, into: Path, routing: str, kv_blocks: int | None) -> Path:
    """A copy of the model's folder with two CPU instances routed by `routing` (and its
    engines' KV cache bounded to `kv_blocks`)."""
    root = into / "repository"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(model_dir, root / model_dir.name)
    config = read_config(root / model_dir.name)
    del config.instance_group[:]
    config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=2)
    config.parameters["INSTANCE_ROUTING"].string_value = routing
    config.parameters["REPORT_CUSTOM_METRICS"].string_value = "true"
    (root / model_dir.name / CONFIG_FILE).write_text(text_format.MessageToString(config))
    for model_json in (root / model_dir.name).glob(f"*/{ENGINE_ARGS_FILE}"):
        engine_args = json.loads(model_json.read_text())
        if kv_blocks is not None:
            engine_args["num_gpu_blocks_override"] = kv_blocks
        model_json.write_text(json.dumps(engine_args))
    return root


def double_server(model: str, repository: Path, root: Path, log_dir: Path) -> ServerProcess:
    """Our app with the engine double (bench/micro_server.py)."""
    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "bench.micro_server", "--model-repository", str(repository)]
    argv += ["--models", model, "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    log = log_dir / "routing-double.log"
    return ServerProcess("routing", argv, url, "/v2/health/ready", log, server_env(), root)


async def ask(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> float:
    """One stream over Triton SSE (no chat template: the engine sees the prompt as it is), read
    to its end so that the engine finishes (and counts) it; its time to first token."""
    body = {
        "text_input": prompt,
        "parameters": {"max_tokens": max_tokens, "ignore_eos": True, "apply_chat_template": False},
    }
    start = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", f"/v2/models/{model}/generate_stream", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"status {response.status_code}")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                if "error" in event:
                    raise RuntimeError(event["error"])
                first = first or time.perf_counter() - start
    if first is None:
        raise RuntimeError("the stream ended without an event")
    return first


def engine_series(text: str, model: str) -> dict[str, dict[str, float]]:
    """The model's `vllm:` counters by name, then instance."""
    names = {
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:e2e_request_latency_seconds_count",
    }
    found: dict[str, dict[str, float]] = {name: {} for name in names}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names and sample.labels.get("model") == model:
                found[sample.name][sample.labels.get("instance", "0")] = sample.value
    return found


async def measure(url: str, model: str, routing: str, config: RoutingConfig) -> RoutingRun:
    """Send the traffic at `config.concurrency` and read the engines' counters around it."""
    prompts = shared_prefix_prompts(config)
    gate = asyncio.Semaphore(config.concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600, trust_env=False) as client:

        async def one(prompt: str) -> float | None:
            async with gate:
                try:
                    return await ask(client, model, prompt, config.max_tokens)
                except (RuntimeError, httpx.HTTPError):
                    return None

        before = engine_series((await client.get("/metrics")).text, model)
        start = time.perf_counter()
        ttfts = await asyncio.gather(*(one(prompt) for prompt in prompts))
        seconds = time.perf_counter() - start
        await asyncio.sleep(1)  # the engines' last statistics
        after = engine_series((await client.get("/metrics")).text, model)
    return summarize(
        routing, [t for t in ttfts if t is not None], len(prompts), before, after, seconds
    )


def summarize(
    routing: str,
    ttfts: list[float],
    sent: int,
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
    seconds: float,
) -> RoutingRun:
    def delta(name: str) -> dict[str, float]:
        return {i: v - before[name].get(i, 0.0) for i, v in sorted(after[name].items())}

    queries = sum(delta("vllm:prefix_cache_queries_total").values())
    hits = sum(delta("vllm:prefix_cache_hits_total").values())
    p99 = percentile(ttfts, 0.99)
    return RoutingRun(
        routing=routing,
        requests=sent,
        errors=sent - len(ttfts),
        ttft_p50_ms=statistics.median(ttfts) * 1000 if ttfts else None,
        ttft_p99_ms=None if p99 is None else p99 * 1000,
        hit_rate=hits / queries if queries else None,
        per_instance={
            i: int(v) for i, v in delta("vllm:e2e_request_latency_seconds_count").items()
        },
        seconds=seconds,
    )


def routing_lines(runs: list[RoutingRun], config: RoutingConfig) -> list[str]:
    """The report: a line per routing, then prefix-aware against least-loaded."""
    lines = [
        f"two CPU instances, {runs[0].requests if runs else 0} streams sharing {PREFIXES} "
        f"prefixes of {config.prefix_words} words, {config.concurrency} at a time, KV cache "
        f"{config.kv_blocks or 'as configured'} blocks per engine:"
    ]
    for run in runs:
        spread = "/".join(str(n) for n in run.per_instance.values()) or "-"
        hits = "-" if run.hit_rate is None else f"{run.hit_rate:.0%}"
        lines.append(
            f"  {run.routing:<12} TTFT p50 {ms(run.ttft_p50_ms)}, p99 {ms(run.ttft_p99_ms)}; "
            f"prefix-cache hits {hits}; requests per instance {spread}; {run.errors} errors"
        )
    by_routing = {run.routing: run for run in runs}
    least, prefix = by_routing.get("least_loaded"), by_routing.get("prefix")
    if least and prefix and least.ttft_p50_ms and least.ttft_p99_ms:
        p50 = ratio(prefix.ttft_p50_ms, least.ttft_p50_ms)
        p99 = ratio(prefix.ttft_p99_ms, least.ttft_p99_ms)
        lines.append(f"  prefix-aware / least-loaded: TTFT p50 {p50}, p99 {p99}")
    return lines


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def ratio(value: float | None, base: float) -> str:
    return "-" if value is None else f"{value / base:.2f}×"


async def run_routing(
    spec: ModelSpec,
    repository: Path,
    root: Path,
    log_dir: Path,
    kvcache_gib: int,
    progress: Progress,
    options: Mapping[str, Any],
) -> tuple[list[str], dict[str, Any]]:
    """Both runs, one server each: the report's lines and the figures for the JSON."""
    config = RoutingConfig.of(options)
    runs = []
    for routing in ROUTINGS:
        folder = routing_repository(
            repository / spec.name, log_dir / f"routing-{routing}", routing, config.kv_blocks
        )
        if config.double:
            server = double_server(spec.name, folder, root, log_dir)
        else:
            server = ours_server(spec, folder, root, log_dir, kvcache_gib, f"routing-{routing}")
        server.start()
        try:
            progress.note(f"routing {routing}: ready after {await server.wait_ready():.0f} s")
            runs.append(await measure(server.base_url, spec.name, routing, config))
        finally:
            server.stop()
    figures = {"config": asdict(config), "runs": [asdict(run) for run in runs]}
    return routing_lines(runs, config), figures
