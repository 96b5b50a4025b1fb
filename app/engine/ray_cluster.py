"""The Ray cluster of a model served by vLLM's Ray executor (`distributed_executor_backend:
"ray"`): the engine joins it, and the model is ready only while the group is whole, that is
while the cluster's live nodes still offer every device the engine's workers need."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from app.core.cancelling import cancel_and_wait
from app.errors import EngineUnhealthyError

logger = logging.getLogger(__name__)

RAY_BACKEND = "ray"
RAY_ADDRESS_ENV = "RAY_ADDRESS"
POLL_SECONDS = 1.0
PROBE_TIMEOUT_SECONDS = 10.0
WAIT_LOG_SECONDS = 30.0

Capacity = Callable[[str], float]
"""How many units of a Ray resource (e.g. "GPU") the cluster's live nodes offer."""


def ray_devices(engine_args: Any) -> int:
    """Devices one engine's workers take: tensor × pipeline parallel size."""
    return int(engine_args.tensor_parallel_size) * int(engine_args.pipeline_parallel_size)


def ray_cluster_capacity(resource: str) -> float:
    """The cluster's live capacity of `resource` (this process joins the cluster first)."""
    import ray

    return float(ray.cluster_resources().get(resource, 0))


def join_ray_cluster(address: str) -> None:
    """Connect this process to the Ray cluster at `address` as a driver (once)."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address=address,
            log_to_driver=False,
            configure_logging=False,
            namespace="triton-vllm-generate",
        )


def keep_own_sigterm_handler() -> None:
    """Give SIGTERM back to this process's handler (the server's drain). A Ray driver gets
    Ray's C++ failure handler, which logs the signal and aborts the process 3 s later
    (absl's alarm): the server would die in its drain with SIGABRT."""
    handler = signal.getsignal(signal.SIGTERM)
    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def leave_ray_cluster() -> None:
    """Disconnect this process from its Ray cluster."""
    import ray

    ray.shutdown()


class RayGroup:
    """Watches whether the Ray cluster at `address` can hold an engine's `devices` workers.

    `start` joins the cluster (and exports RAY_ADDRESS, so that vLLM's engine core joins the
    same one) and waits until the group is whole; then a poll keeps `is_whole` current.
    Supervision restarts an engine by starting it again: `start` (or `wait_whole`) returns
    once the group is whole again.
    """

    connected = 0
    """Groups of this process connected to Ray (one Ray connection serves them all)."""

    def __init__(
        self,
        address: str,
        devices: int,
        resource: str,
        *,
        poll_seconds: float = POLL_SECONDS,
        capacity: Capacity = ray_cluster_capacity,
        connect: Callable[[str], None] = join_ray_cluster,
        disconnect: Callable[[], None] = leave_ray_cluster,
    ) -> None:
        self.address = address
        self.devices = devices
        self.resource = resource
        self._poll_seconds = poll_seconds
        self._capacity = capacity
        self._connect = connect
        self._disconnect = disconnect
        self._connected = False
        self._offered = 0.0
        self._whole = asyncio.Event()
        self._lost_a_node = False
        self._poll: asyncio.Task[None] | None = None

    @property
    def is_whole(self) -> bool:
        return self._whole.is_set()

    @property
    def intact(self) -> bool:
        """Whole, and whole ever since the engine was built: a node lost since then took some
        of the engine's workers with it, and a node joining back does not bring them back."""
        return self.is_whole and not self._lost_a_node

    def engine_built(self) -> None:
        """The engine now runs on the nodes there are: only later losses count against it (one
        lost while it was being built shows in the engine itself, or in its health probe)."""
        self._lost_a_node = False

    @property
    def description(self) -> str:
        return (
            f"Ray cluster {self.address} offers {self._offered:g} "
            f"of the {self.devices} {self.resource} the model needs"
        )

    async def start(self) -> None:
        """Join the cluster, start watching it, and wait until the group is whole."""
        os.environ[RAY_ADDRESS_ENV] = self.address
        if not self._connected:
            await asyncio.to_thread(self._connect, self.address)
            keep_own_sigterm_handler()
            self._connected = True
            RayGroup.connected += 1
        await self.probe()
        if self._poll is None or self._poll.done():
            self._poll = asyncio.create_task(self._watch(), name=f"ray-group {self.address}")
        await self.wait_whole()

    async def wait_whole(self) -> None:
        """Return once the cluster offers every device again (logging while it does not)."""
        while not self.is_whole:
            logger.info("waiting for the Ray group: %s", self.description)
            try:
                await asyncio.wait_for(self._whole.wait(), WAIT_LOG_SECONDS)
            except asyncio.TimeoutError:
                continue

    def check(self) -> None:
        """Raise `EngineUnhealthyError` while the group is not whole, or once it lost a node."""
        if not self.is_whole:
            raise EngineUnhealthyError(f"Model is unavailable: {self.description}")
        if self._lost_a_node:
            raise EngineUnhealthyError(
                "Model is unavailable: the Ray group lost a node since the engine was built"
            )

    async def stop(self) -> None:
        """Stop watching; the last group to stop disconnects this process from Ray."""
        poll, self._poll = self._poll, None
        if poll is not None:
            await cancel_and_wait(poll)
        if self._connected:
            self._connected = False
            RayGroup.connected -= 1
            if RayGroup.connected == 0:
                await asyncio.to_thread(self._disconnect)

    async def probe(self) -> None:
        """Ask the cluster once; a cluster that does not answer counts as not whole."""
        try:
            offered = await asyncio.wait_for(
                asyncio.to_thread(self._capacity, self.resource), PROBE_TIMEOUT_SECONDS
            )
        except Exception as exc:  # noqa: BLE001 - GCS unreachable, Ray shut down, a timeout: all "not whole"
            logger.warning("Ray cluster %s does not answer: %r", self.address, exc)
            offered = 0.0
        was_whole, self._offered = self.is_whole, offered
        if offered >= self.devices:
            self._whole.set()
            if not was_whole:
                logger.info("the Ray group is whole: %s", self.description)
        else:
            self._whole.clear()
            if was_whole:
                self._lost_a_node = True
                logger.warning(
                    "the Ray group lost a node, the model is unready: %s", self.description
                )

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._poll_seconds)
            await self.probe()


class LocalGroup:
    """An engine whose workers all run on this node: always whole, nothing to watch."""

    is_whole = True
    intact = True

    def engine_built(self) -> None:
        pass

    async def start(self) -> None:
        pass

    async def wait_whole(self) -> None:
        pass

    def check(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def engine_group(engine_args: Any, address: str | None) -> RayGroup | LocalGroup:
    """What an engine's readiness covers beyond itself: the Ray group for vLLM's Ray executor
    with a known cluster address (the setting, else RAY_ADDRESS); else only this node (for a
    Ray engine without an address, vLLM starts a single-node Ray cluster itself)."""
    if engine_args.distributed_executor_backend != RAY_BACKEND:
        return LocalGroup()
    address = address or os.environ.get(RAY_ADDRESS_ENV)
    if not address:
        logger.warning(
            "no Ray address set (RAY_ADDRESS): vLLM will start a single-node Ray cluster"
        )
        return LocalGroup()
    from vllm.platforms import current_platform

    return RayGroup(address, ray_devices(engine_args), current_platform.ray_device_key or "GPU")
