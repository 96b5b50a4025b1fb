"""docker/compose.yaml's stack, started as docs/deployment.md says: the server and Prometheus
scraping its metrics. The OpenTelemetry Collector's image is not built here: no registry this
project reaches (Debian, PyPI, npm) carries an official collector build."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml

from app.paths import PROJECT_ROOT
from tests.image.conftest import IMAGE_CPU, START_TIMEOUT, TOOL, report
from tests.image.container import Container
from tests.image.lines import DEPLOYMENT_DOC, only
from tests.support.asgi import free_ports

COMPOSE_FILE = PROJECT_ROOT / "docker" / "compose.yaml"
PROMETHEUS_IMAGE = os.environ.get("TVG_PROMETHEUS_IMAGE", "")
PORT_VARIABLES = ("TVG_HTTP_PORT", "TVG_GRPC_PORT", "TVG_METRICS_PORT", "TVG_PROMETHEUS_PORT")


def compose_command() -> list[str]:
    """The documented `docker compose` line's program: podman-compose where podman runs."""
    documented = only(DEPLOYMENT_DOC, "docker compose", "up -d")
    assert "-f docker/compose.yaml" in documented
    if TOOL == "podman":
        if not shutil.which("podman-compose"):
            pytest.fail("podman-compose is missing: `make image-tools` installs it", pytrace=False)
        return ["podman-compose"]
    return ["docker", "compose"]


@dataclass
class Stack:
    env: dict[str, str]

    def url(self, variable: str) -> str:
        return f"http://localhost:{self.env[variable]}"


def prometheus_query(stack: Stack, query: str) -> list[dict[str, Any]]:
    response = httpx.get(
        stack.url("TVG_PROMETHEUS_PORT") + "/api/v1/query", params={"query": query}, timeout=10
    )
    assert response.status_code == 200, response.text
    return list(response.json()["data"]["result"])


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if not PROMETHEUS_IMAGE:
        pytest.fail("TVG_PROMETHEUS_IMAGE is not set: `make image-test` builds it", pytrace=False)
    project = f"imagetest{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, TVG_IMAGE=IMAGE_CPU, TVG_PROMETHEUS_IMAGE=PROMETHEUS_IMAGE)
    env |= {
        name: str(port)
        for name, port in zip(PORT_VARIABLES, free_ports(len(PORT_VARIABLES)), strict=False)
    }
    compose = [*compose_command(), "-f", str(COMPOSE_FILE), "-p", project]
    started = time.monotonic()
    up = subprocess.run(
        [*compose, "up", "-d", "server", "prometheus"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        server = Container(TOOL, f"{project}_server_1")
        ready = server.wait_ready(f"http://localhost:{env['TVG_HTTP_PORT']}", START_TIMEOUT)
        total = time.monotonic() - started
        report(f"compose: server ready {ready:.0f} s after the container started ({total:.0f} s)")
        yield Stack(env)
    finally:
        subprocess.run(
            [*compose, "down", "-v"], env=env, capture_output=True, timeout=300, check=False
        )
        if TOOL == "podman":  # podman-compose 1.0 leaves the project's network behind
            network = f"{project}_default"
            subprocess.run([TOOL, "network", "rm", network], capture_output=True, check=False)


def test_prometheus_scrapes_the_servers_metrics(stack: Stack) -> None:
    generated = httpx.post(
        stack.url("TVG_HTTP_PORT") + "/v2/models/smollm2/generate",
        json={"text_input": "Hello", "parameters": {"max_tokens": 8}},
        timeout=120,
    )
    assert generated.status_code == 200, generated.text
    query = 'nv_inference_request_success{job="triton-vllm-generate"}'
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        up = prometheus_query(stack, 'up{job="triton-vllm-generate"}')
        successes = prometheus_query(stack, query)
        if up and up[0]["value"][1] == "1" and sum(float(s["value"][1]) for s in successes) >= 1:
            break
        time.sleep(3)
    report(f"compose: Prometheus up={up}; {query} = {[s['value'][1] for s in successes]}")
    assert up and up[0]["value"][1] == "1"
    assert sum(float(s["value"][1]) for s in successes) >= 1


def test_the_collector_config_wires_every_pipeline() -> None:
    """Checked as a file only: its image is not run here (see the module's docstring)."""
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    (mount,) = compose["services"]["otel-collector"]["volumes"]
    source = mount.split(":")[0]
    config = yaml.safe_load((COMPOSE_FILE.parent / source).read_text())
    for name, pipeline in config["service"]["pipelines"].items():
        assert set(pipeline["receivers"]) <= set(config["receivers"]), name
        assert set(pipeline["exporters"]) <= set(config["exporters"]), name
    scrape = config["receivers"]["prometheus"]["config"]["scrape_configs"][0]
    assert scrape["static_configs"][0]["targets"] == ["server:8002"]
    report(
        "compose: otel-collector not run (no collector build on Debian, PyPI or npm); "
        "its config's pipelines checked"
    )
