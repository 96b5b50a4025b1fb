"""Against a container started by the README's `docker run` line: the README's curl and SSE
lines, Triton's gRPC client, the OpenAI SDK, the health routes, how the process runs, the
image's HEALTHCHECK, and a drain on SIGTERM. The drain stops the container: it runs last."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from typing import Any

import httpx
import openai
import tritonclient.grpc as triton_grpc

from app.engine.cpu_defaults import CpuHost
from app.paths import PROJECT_ROOT
from app.settings import Settings
from tests.image.conftest import TOOL, Started, report
from tests.image.container import run
from tests.image.lines import README, on_ports, only
from tests.support.servers import seconds_per_token, tokens_for
from tests.support.sse import StreamReader
from tests.support.triton_grpc import by_id, is_final, stream_results, text_of, vllm_request
from tests.support.waiting import wait_for


def readme_curl(started: Started, path: str) -> str:
    """The README's curl line for `path`, run on the container's port; its output."""
    line = on_ports(only(README, "curl", f"/v2/models/smollm2/{path} "), started.ports)
    result = subprocess.run(
        ["bash", "-c", line + " --fail-with-body --max-time 120"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_readme_runs_the_container_as_the_checks_need() -> None:
    """The flags the image needs: a larger /dev/shm than the default 64 MB (vLLM's CPU engine
    maps 160 MiB and more), a read-only root, a cache volume, the model as a volume."""
    line = only(README, "docker run")
    flags = ("--shm-size=1g", "--read-only", "--tmpfs /tmp", ":/cache", ":/app/.cache/models:ro")
    for flag in flags:
        assert flag in line, flag


def test_readme_generate_line(readme_container: Started) -> None:
    body = json.loads(readme_curl(readme_container, "generate"))
    report(f"generate: {body}")
    assert body["model_name"] == "smollm2" and body["text_output"].strip()


def test_readme_generate_stream_line(readme_container: Started) -> None:
    output = readme_curl(readme_container, "generate_stream")
    frames = [line for line in output.splitlines() if line]
    assert all(line.startswith("data: ") for line in frames), output
    events = [json.loads(line.removeprefix("data: ")) for line in frames]
    text = "".join(e["text_output"] for e in events)
    report(f"generate_stream: {len(events)} events, text {text!r}")
    assert len(events) >= 2 and {e["model_name"] for e in events} == {"smollm2"}


def test_tritonclient_grpc_sample_request(readme_container: Started) -> None:
    """The vLLM backend's sample request (samples/client.py) over Triton's gRPC client."""
    client = triton_grpc.InferenceServerClient(readme_container.grpc)
    try:
        assert client.is_server_ready() and client.is_model_ready("smollm2")
        request = vllm_request(
            "What is Triton Inference Server?",
            request_id="1",
            stream=True,
            model_name="smollm2",
            sampling_parameters={"max_tokens": 16, "temperature": 0},
            exclude_input_in_output=True,
        )
        (responses,) = by_id(stream_results(client, [request])).values()
    finally:
        client.close()
    report(f"gRPC ModelStreamInfer: {len(responses)} responses, text {text_of(responses)!r}")
    assert text_of(responses).strip() and is_final(responses[-1])


def test_openai_sdk(readme_container: Started) -> None:
    with openai.OpenAI(
        base_url=f"{readme_container.http}/v1", api_key="unused", timeout=120
    ) as client:
        chat = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Say hello"}], max_tokens=16
        )
        streamed = "".join(
            chunk.choices[0].text
            for chunk in client.completions.create(
                model="smollm2", prompt="Once upon a time", max_tokens=16, stream=True
            )
            if chunk.choices
        )
    answer = chat.choices[0].message.content
    report(f"OpenAI SDK: chat {answer!r}; streamed completion {streamed!r}")
    assert chat.choices[0].message.content and streamed


def test_health_routes_and_metrics_port(readme_container: Started) -> None:
    for path in ("/health", "/v2/health/live", "/v2/health/ready"):
        assert httpx.get(readme_container.http + path, timeout=10).status_code == 200, path
    metrics = httpx.get(readme_container.metrics + "/metrics", timeout=30)
    assert metrics.status_code == 200 and "vllm:" in metrics.text
    report("GET /health, /v2/health/live, /v2/health/ready: 200; metrics port serves vllm: series")


def test_the_image_chooses_the_dtype_by_the_cpu(readme_container: Started) -> None:
    """The same rule as outside the image: bfloat16 only where the CPU computes it natively."""
    config = httpx.get(f"{readme_container.http}/v2/models/smollm2/config", timeout=30).json()
    note = config["parameters"]["engine_dtype"]["string_value"]
    expected = "auto: this CPU computes bfloat16" if CpuHost.this().native_bf16 else "float32: "
    report(f"engine dtype in the container: {note}")
    assert note.startswith(expected), note


def test_runs_as_non_root_on_a_read_only_root_with_a_writable_cache(
    readme_container: Started,
) -> None:
    container = readme_container.container
    uids = container.exec("sh", "-c", "grep -h '^Uid:' /proc/[0-9]*/status").stdout.split("\n")
    assert uids[0] and all(line.split()[1:] == ["1000"] * 4 for line in uids if line), uids
    assert container.exec("cat", "/proc/1/comm").stdout.strip() == "tini"
    assert container.inspect()["HostConfig"]["ReadonlyRootfs"] is True
    refused = container.exec("touch", "/app/written", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    container.exec("sh", "-c", "echo ok > /cache/written && rm /cache/written")
    report(
        f"processes run as uid 1000 under tini ({len([u for u in uids if u])} processes); "
        "/app is read-only, /cache writable"
    )


def health_status(state: dict[str, Any]) -> str:
    health = state["State"].get("Health") or state["State"].get("Healthcheck") or {}
    return str(health.get("Status", ""))


def test_the_image_healthcheck_turns_healthy(readme_container: Started) -> None:
    """podman runs the image's HEALTHCHECK on demand (`healthcheck run`, as its timer would);
    docker on its interval."""
    container = readme_container.container
    if TOOL == "podman":
        container_run = run(TOOL, "healthcheck", "run", container.name, check=False)
        assert container_run.returncode == 0, container_run.stdout + container_run.stderr
    deadline = time.monotonic() + 90
    while health_status(container.inspect()) != "healthy" and time.monotonic() < deadline:
        time.sleep(2)
    report(f"HEALTHCHECK status: {health_status(container.inspect())}")
    assert health_status(container.inspect()) == "healthy"


STREAM_SHARE_OF_DRAIN = 0.4
"""How long the stream that the drain must let finish should run, as a share of the image's
drain timeout (30 s): long enough that the signal, the turn of readiness and the refused
request all land while it runs, with room left for the engine's shutdown. Sized by the
container's measured time per token: hosts differ ~20x in speed."""


READY = "/v2/health/ready"


def stop_bounds(env: dict[str, str]) -> tuple[float, float]:
    """The container's drain timeout, and the time docs/operations.md gives its stop (the
    drain timeout + SHUTDOWN_GRACE_SECONDS)."""
    drain_timeout = float(env["DRAIN_TIMEOUT_SECONDS"])
    grace = env.get(
        "SHUTDOWN_GRACE_SECONDS", Settings.model_fields["shutdown_grace_seconds"].default
    )
    return drain_timeout, drain_timeout + float(grace)


def longest_pause(arrivals: list[float], since: float) -> str:
    """The longest wait between two of a stream's events after `since`, as a figure."""
    after = [at - since for at in arrivals if at >= since]
    gaps = [(later - earlier, earlier) for earlier, later in itertools.pairwise(after)]
    if not gaps:
        return ""
    gap, began = max(gaps)
    return f"; the stream's longest pause after SIGTERM: {gap:.2f} s from {began:.1f} s"


def test_sigterm_drains_the_running_stream_and_exits_0_within_its_stop_bound(
    readme_container: Started,
) -> None:
    """The stream runs to its end, then the engine stops and the container exits 0, within
    the bound docs/operations.md gives a stop (DRAIN_TIMEOUT_SECONDS + SHUTDOWN_GRACE_SECONDS;
    the engine's own stop takes some 4 s on a quiet 2-core host, 21 s on a busy one).
    Readiness and a new request are asked over a connection opened before the stream, and
    no connection is opened while it runs: on some hosts a new connection to a published
    port stalls the container's network path, the running stream's connection too, for
    seconds (up to the stream's end in CI), while probes inside the container never wait."""
    container = readme_container.container
    state = container.inspect()
    env = dict(item.split("=", 1) for item in state["Config"]["Env"])
    drain_timeout, stop_bound = stop_bounds(env)
    per_token = seconds_per_token(readme_container.http)
    max_tokens = tokens_for(per_token, STREAM_SHARE_OF_DRAIN * drain_timeout)
    body = {
        "text_input": "Count to fifty",
        "parameters": {"max_tokens": max_tokens, "ignore_eos": True},
    }
    stream = StreamReader(readme_container.http, body)
    with httpx.Client(base_url=readme_container.http, timeout=30) as kept:
        assert kept.get(READY).status_code == 200
        stream.start()
        assert stream.first_event.wait(60), "the stream never started"
        signalled = time.monotonic()
        sent = container.send_signal(signal.SIGTERM, state)
        moments = {f"SIGTERM sent {sent}": 0.0}
        wait_for(lambda: kept.get(READY).status_code != 200, 10, interval=0.1)
        readiness = kept.get(READY).status_code
        moments[f"readiness answered {readiness}"] = time.monotonic() - signalled
        refused = kept.post("/v2/models/smollm2/generate", json=body)
        moments[f"new request answered {refused.status_code}"] = time.monotonic() - signalled
        refused_while_streaming = stream.is_alive()
        stream.join(120)
        moments["stream ended"] = stream.ended_at - signalled
        waited = run(TOOL, "wait", container.name, timeout=drain_timeout + 60)
        exit_code = int(waited.stdout.strip())
        stopped_after = moments[f"container exited {exit_code}"] = time.monotonic() - signalled
    timeline = ", ".join(
        f"{name} at {at:.1f} s" for name, at in sorted(moments.items(), key=lambda m: m[1])
    )
    figures = (
        f"{per_token * 1000:.0f} ms a token measured; a stream of {max_tokens} tokens got "
        f"{len(stream.events)} events; after SIGTERM: {timeline} "
        f"(drain timeout {drain_timeout:g} s, stop bound {stop_bound:g} s)"
    )
    figures += longest_pause(stream.arrivals, signalled)
    report(f"SIGTERM: {figures}")
    answered = f"{figures}; the new request's answer: {refused.text[:300]}"
    if not (refused_while_streaming and refused.status_code == 503):
        answered += f"\ncontainer log (last lines):\n{container.logs()[-4000:]}"
    assert refused_while_streaming, (
        f"the stream ended before the new request was answered: {answered}"
    )
    assert readiness == 503 and refused.status_code == 503, answered
    assert len(stream.events) == max_tokens and "error" not in stream.events[-1], figures
    assert moments["stream ended"] < drain_timeout, figures
    assert exit_code == 0 and stopped_after < stop_bound, figures
