"""The image tier: `make image-test` builds the images, then runs these tests against
containers of them. Elsewhere (a plain `pytest`) they are skipped."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app.paths import PROJECT_ROOT
from tests.image.container import Container, run
from tests.image.lines import README, on_ports, only
from tests.support.asgi import free_ports

IMAGE_CPU = os.environ.get("IMAGE_CPU", "")
TOOL = os.environ.get("IMAGE_TOOL", "podman")
START_TIMEOUT = 900  # seconds; smollm2 takes 40-140 s on two slow cores, more while others run
DOCUMENTED_PORTS = (8000, 8001, 8002)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # warnings are shown, not errors, against the containers
        if "tests/image/" in str(item.fspath):
            item.add_marker(pytest.mark.filterwarnings("default"))
    if IMAGE_CPU:
        return
    skip = pytest.mark.skip(reason="run by `make image-test`, which builds the images first")
    for item in items:
        if "tests/image/" in str(item.fspath):
            item.add_marker(skip)


def report(line: str) -> None:
    """A figure for the test's output (`make image-test` runs pytest with -s)."""
    print(f"\n[image-test] {line}", flush=True)


@dataclass
class Started:
    """A container started from a documented line, on free host ports."""

    container: Container
    command: str
    ports: dict[int, int]
    ready_seconds: float

    @property
    def http(self) -> str:
        return f"http://localhost:{self.ports[8000]}"

    @property
    def grpc(self) -> str:
        return f"localhost:{self.ports[8001]}"

    @property
    def metrics(self) -> str:
        return f"http://localhost:{self.ports[8002]}"


def readme_run_line() -> str:
    return only(README, "docker run", IMAGE_CPU.split("/")[-1] if IMAGE_CPU else "")


@pytest.fixture(scope="session")
def readme_container() -> Iterator[Started]:
    """The README's `docker run` line, run as written but for the container's name, its cache
    volume's name and the host ports (and podman for docker where podman is the engine)."""
    suffix = uuid.uuid4().hex[:8]
    ports = dict(zip(DOCUMENTED_PORTS, free_ports(len(DOCUMENTED_PORTS)), strict=False))
    documented = readme_run_line()
    command = on_ports(documented, ports)
    name = f"image-test-{suffix}"
    command = command.replace("--name generate ", f"--name {name} ")
    command = command.replace("generate-cache:/cache", f"image-test-cache-{suffix}:/cache")
    command = TOOL + command.removeprefix("docker")
    report(f"README line: {documented}")
    started = time.monotonic()
    subprocess.run(["bash", "-c", command], cwd=PROJECT_ROOT, check=True, timeout=120)
    container = Container(TOOL, name)
    try:
        ready = container.wait_ready(f"http://localhost:{ports[8000]}", START_TIMEOUT)
        total = time.monotonic() - started
        report(f"container ready {ready:.0f} s after start ({total:.0f} s with `run`)")
        yield Started(container, command, ports, ready)
    finally:
        container.remove()
        run(TOOL, "volume", "rm", "-f", f"image-test-cache-{suffix}", check=False)
