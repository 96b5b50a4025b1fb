"""The pieces of the multi-process mode without an engine: core hand-out and replacement,
the merged metrics, the supervisor channel, overrides on the wire, the default count, the log
file every frontend process shares."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import threading
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import model_config_pb2

from app.engine.client_slot import ClientSlot
from app.errors import ServerError
from app.launch.frontend_group import core_host, run_frontend_process
from app.multiprocess.channel import Channel, ChannelClosed, RemoteError
from app.multiprocess.cores import EngineCores
from app.multiprocess.link import FrontendProcessLink, decode_override, encode_override
from app.multiprocess.link_calls import LinkCall
from app.multiprocess.metrics import merge_expositions
from app.multiprocess.supervisor import Supervisor
from app.multiprocess.supervisor import core_key as supervisor_core_key
from app.observability.log_control import LOG_CONTROL
from app.repository.instances import InstanceKind, ModelInstance
from app.repository.overrides import ModelOverride
from app.settings import Settings

KEY = ("m", "1", "start", "0")


class FakeHost:
    def __init__(self, clients: int) -> None:
        self.slots = [ClientSlot(f"in-{i}", f"out-{i}", clients, i) for i in range(clients)]
        self.launched = self.notified = self.stopped = False
        self.dead = threading.Event()

    def launch(self) -> None:
        self.launched = True

    def wait_until_dead(self) -> None:
        self.dead.wait()

    def notify_dead(self) -> None:
        self.notified = True

    def stop(self) -> None:
        self.stopped = True
        self.dead.set()


class Hosts:
    def __init__(self) -> None:
        self.made: list[FakeHost] = []
        self.placed: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def __call__(
        self,
        key: tuple[str, str, str, str],
        engine_args: dict[str, Any],
        instance: dict[str, Any],
        clients: int,
        run_dir: Path,
    ) -> FakeHost:
        host = FakeHost(clients)
        self.made.append(host)
        self.placed.append((key, instance))
        return host


async def test_frontend_processes_share_one_core_and_a_second_use_of_a_slot_gets_a_fresh_one(
    tmp_path: Path,
) -> None:
    hosts = Hosts()
    cores = EngineCores(2, tmp_path, hosts)
    first = await cores.acquire(KEY, {}, 0)
    second = await cores.acquire(KEY, {}, 1)
    assert len(hosts.made) == 1 and hosts.made[0].launched
    assert (first["index"], second["index"], first["epoch"]) == (0, 1, 1)
    # frontend process 0's engine restarted: the core cannot take it back
    again = await cores.acquire(KEY, {}, 0)
    assert len(hosts.made) == 2 and again["epoch"] == 2
    # frontend process 1's engine learns it must restart
    assert hosts.made[0].notified and hosts.made[0].stopped
    await cores.release(KEY, 1, 1)  # a release for the old core changes nothing
    assert not hosts.made[1].stopped
    await cores.stop_all()


async def test_a_core_stops_once_every_frontend_process_released_it(tmp_path: Path) -> None:
    hosts = Hosts()
    cores = EngineCores(2, tmp_path, hosts)
    for process in (0, 1):
        await cores.acquire(KEY, {}, process)
    await cores.release(KEY, 1, 0)
    assert not hosts.made[0].stopped
    await cores.release(KEY, 1, 1)
    assert hosts.made[0].stopped


async def test_a_release_of_the_old_core_during_a_replacement_does_not_count_against_the_new(
    tmp_path: Path,
) -> None:
    """Frontend process 1 gives back its slot of the old core while process 0's fresh core
    launches: once process 1 joins the new core, process 0 leaving it must not stop it under
    process 1."""
    launching, proceed = threading.Event(), threading.Event()

    class SlowHosts(Hosts):
        def __call__(self, *args: Any) -> FakeHost:
            host = super().__call__(*args)
            if len(self.made) == 2:  # the replacement: launches until told to go on

                def slow_launch() -> None:
                    launching.set()
                    proceed.wait(10)
                    host.launched = True

                host.launch = slow_launch  # type: ignore[method-assign]
            return host

    hosts = SlowHosts()
    cores = EngineCores(2, tmp_path, hosts)
    for process in (0, 1):
        await cores.acquire(KEY, {}, process)
    replacing = asyncio.ensure_future(cores.acquire(KEY, {}, 0))  # process 0 restarted
    await asyncio.to_thread(launching.wait, 10)
    old_release = asyncio.ensure_future(cores.release(KEY, 1, 1))
    await asyncio.sleep(0.05)
    proceed.set()
    await replacing
    await old_release
    assert (await cores.acquire(KEY, {}, 1))["epoch"] == 2
    await cores.release(KEY, 2, 0)
    assert not hosts.made[1].stopped, "the core stopped while process 1 still uses it"
    await cores.release(KEY, 2, 1)
    assert hosts.made[1].stopped


async def test_a_dead_core_is_reported_to_its_clients_and_replaced_on_the_next_request(
    tmp_path: Path,
) -> None:
    hosts = Hosts()
    cores = EngineCores(2, tmp_path, hosts)
    await cores.acquire(KEY, {}, 0)
    hosts.made[0].dead.set()  # the core process exited
    for _ in range(100):
        if hosts.made[0].notified:
            break
        await asyncio.sleep(0.01)
    assert hosts.made[0].notified
    replaced = await cores.acquire(KEY, {}, 1)
    assert len(hosts.made) == 2 and replaced["epoch"] == 2
    await cores.stop_all()


async def test_a_reload_gets_its_own_core_beside_the_old_one(tmp_path: Path) -> None:
    hosts = Hosts()
    cores = EngineCores(1, tmp_path, hosts)
    await cores.acquire(KEY, {}, 0)
    await cores.acquire(("m", "1", "0-reload", "0"), {}, 0)
    assert len(hosts.made) == 2 and not hosts.made[0].stopped
    await cores.release(KEY, 1, 0)
    assert hosts.made[0].stopped and not hosts.made[1].stopped
    await cores.stop_all()


def exposition(success: int, restarts: int, cache: float, latency: float) -> str:
    registry = CollectorRegistry()
    Counter("nv_inference_request_success", "ok", ["model"], registry=registry).labels("m").inc(
        success
    )
    Counter("server_engine_restarts", "restarts", ["model"], registry=registry).labels("m").inc(
        restarts
    )
    Gauge("vllm:gpu_cache_usage_perc", "cache", ["model"], registry=registry).labels("m").set(cache)
    Histogram("ttft", "ttft", ["model"], buckets=[0.1, 1], registry=registry).labels("m").observe(
        latency
    )
    return generate_latest(registry).decode()


def test_metrics_of_every_process_merge_into_one_exposition() -> None:
    merged = merge_expositions([exposition(3, 1, 0.25, 0.05), exposition(4, 1, 0.5, 0.5)]).decode()
    samples = {
        (sample.name, sample.labels.get("le")): sample.value
        for family in text_string_to_metric_families(merged)
        for sample in family.samples
    }
    assert samples[("nv_inference_request_success_total", None)] == 7
    assert samples[("server_engine_restarts_total", None)] == 1  # one core restart, seen by both
    assert samples[("vllm:gpu_cache_usage_perc", None)] == 0.5
    assert samples[("ttft_bucket", "0.1")] == 1 and samples[("ttft_bucket", "1.0")] == 2
    assert samples[("ttft_count", None)] == 2 and samples[("ttft_sum", None)] == pytest.approx(0.55)


async def test_the_channel_answers_calls_both_ways_and_fails_them_when_closed() -> None:
    async def supervisor_side(op: str, args: dict[str, Any]) -> Any:
        if op == "fail":
            raise ValueError("the field 'x' is wrong")
        if op == "hang":
            await asyncio.sleep(60)
        return {"op": op, **args}

    async def frontend_side(op: str, args: dict[str, Any]) -> Any:
        return "metrics text"

    frontend_end, supervisor_end = socket.socketpair()
    frontend = Channel(*await asyncio.open_connection(sock=frontend_end), frontend_side)
    supervisor = Channel(*await asyncio.open_connection(sock=supervisor_end), supervisor_side)
    tasks = [asyncio.create_task(frontend.serve()), asyncio.create_task(supervisor.serve())]
    assert await frontend.call("acquire", frontend_process=1) == {
        "op": "acquire",
        "frontend_process": 1,
    }
    assert await supervisor.call("metrics") == "metrics text"
    with pytest.raises(RemoteError, match="the field 'x' is wrong") as raised:
        await frontend.call("fail")
    assert raised.value.kind == "ValueError"
    pending = asyncio.create_task(frontend.call("hang"))
    await asyncio.sleep(0.05)
    await supervisor.close()
    await frontend.close()
    with pytest.raises(ChannelClosed):
        await asyncio.wait_for(pending, 5)
    await asyncio.gather(*tasks, return_exceptions=True)


class Answering:
    """A frontend process's channel as the supervisor sees it, answering a call with `reply`
    (raised when it is an exception)."""

    def __init__(self, reply: object) -> None:
        self.reply = reply

    async def call(self, op: str, **args: Any) -> object:
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply


async def test_a_gather_leaves_out_a_frontend_process_gone_but_fails_on_one_that_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frontend process whose metrics failed must fail the scrape, not vanish from it."""
    supervisor = Supervisor.__new__(Supervisor)
    channels = {0: Answering("a"), 1: Answering(ChannelClosed("metrics"))}
    monkeypatch.setattr(supervisor, "_channels", channels, raising=False)
    assert await supervisor._gather(LinkCall.METRICS) == ["a"]
    channels[2] = Answering(RemoteError("AttributeError", "no get_num_unfinished_requests"))
    with pytest.raises(RemoteError, match="no get_num_unfinished_requests"):
        await supervisor._gather(LinkCall.METRICS)


async def test_a_frontend_process_answers_a_failed_gather_of_metrics_with_a_server_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    link = FrontendProcessLink(0, "unused")

    async def failing(op: str, **args: Any) -> object:
        raise RemoteError("AttributeError", "no get_num_unfinished_requests")

    monkeypatch.setattr(link, "_call", failing)
    with pytest.raises(
        ServerError, match="a frontend process failed to report its metrics: no get_num_unfinished"
    ):
        await link.metrics()


def test_a_load_override_crosses_to_the_other_processes_unchanged() -> None:
    config = model_config_pb2.ModelConfig(name="m", backend="vllm")
    override = ModelOverride(config, {PurePosixPath("1/model.json"): b'{"model": "x"}'})
    back = decode_override(encode_override(override))
    assert back is not None and back.config == config and back.files == override.files
    assert decode_override(encode_override(None)) is None


def test_frontend_processes_default_to_one_on_a_machine_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FRONTEND_PROCESSES", raising=False)
    monkeypatch.setattr("app.settings.glob.glob", lambda pattern: [])
    assert Settings().frontend_process_count() == 1
    monkeypatch.setattr("app.settings.glob.glob", lambda pattern: ["/dev/nvidia0"])
    monkeypatch.setattr("app.settings.os.sched_getaffinity", lambda pid: set(range(16)))
    assert Settings().frontend_process_count() == 4
    monkeypatch.setenv("FRONTEND_PROCESSES", "3")
    assert Settings().frontend_process_count() == 3


async def test_each_frontend_process_is_spawned_with_the_supervisors_log_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--log-file: the supervisor's log file goes to every frontend process it starts."""
    spawned: list[tuple[Any, ...]] = []
    read_end, write_end = os.pipe()

    class Spawned:
        sentinel = read_end

        def start(self) -> None:
            pass

    class Context:
        def Process(self, **options: Any) -> Spawned:
            spawned.append(options["args"])
            return Spawned()

    monkeypatch.setattr(multiprocessing, "get_context", lambda method: Context())
    monkeypatch.setattr(LOG_CONTROL, "file", "/logs/server.log")
    supervisor = Supervisor.__new__(Supervisor)
    supervisor._processes = {}
    supervisor._frontend_main = run_frontend_process
    settings = Settings()
    try:
        supervisor._spawn(0, settings, "supervisor.sock")
    finally:
        asyncio.get_running_loop().remove_reader(read_end)
        os.close(read_end)
        os.close(write_end)
    assert spawned == [(0, settings, "supervisor.sock", "/logs/server.log")]


def test_a_frontend_process_logs_to_the_file_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    class Configured(Exception):
        pass

    def configure_logs(settings: Settings, log_file: str = "") -> None:
        raise Configured(log_file)

    monkeypatch.setattr("app.main.configure_logs", configure_logs)
    with pytest.raises(Configured, match=r"^/logs/server\.log$"):
        run_frontend_process(0, Settings(), "supervisor.sock", "/logs/server.log")


async def test_each_instance_of_a_model_gets_its_own_core_placed_as_the_instance_is(
    tmp_path: Path,
) -> None:
    hosts = Hosts()
    cores = EngineCores(2, tmp_path, hosts)
    placements = [ModelInstance(i, f"m_{i}", InstanceKind.CPU, cpus=(i,)) for i in (0, 1)]
    for process in (0, 1):
        for instance in placements:
            key = ("m", "1", "start", str(instance.index))
            await cores.acquire(key, {}, process, instance.to_json())
    assert len(hosts.made) == 2, "one core per instance, shared by both frontend processes"
    assert hosts.placed == [
        (("m", "1", "start", "0"), placements[0].to_json()),
        (("m", "1", "start", "1"), placements[1].to_json()),
    ]
    await cores.stop_all()
    host = core_host(("m", "1", "start", "1"), {"model": "x"}, placements[1].to_json(), 2, tmp_path)
    assert host.spec.instance == placements[1]  # type: ignore[attr-defined]
    assert supervisor_core_key({"model": "m", "version": "1", "load": "l", "instance": "1"}) == (
        "m",
        "1",
        "l",
        "1",
    )
