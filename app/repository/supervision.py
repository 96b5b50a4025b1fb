"""Engines that heal themselves: the engine of each instance of a served model version is
watched, and a failed one is replaced with exponential backoff, within a budget of restarts
per time window (each instance its own)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from app.core.cancelling import cancel_and_wait
from app.core.migration import MigratableEngine
from app.core.types import InferenceEngine
from app.errors import ServerError
from app.repository.heap_freezer import thawed_heap
from app.repository.layout import ModelSpec
from app.repository.liveness import ProgressWatch
from app.repository.served_model import InstanceSlot, ModelState, ServedModel

logger = logging.getLogger(__name__)

EngineFactory = Callable[[ModelSpec], InferenceEngine]
RestartListener = Callable[[ServedModel, str], None]
"""Told of each successful restart: the model and the cause of the failure."""
MigrationListener = Callable[[ServedModel], None]
"""Told of each request that moved on to a restarted engine."""
WAIT_RECHECK_SECONDS = 1.0
"""A request waiting for a replacement engine also looks at the model this often."""


@dataclass(frozen=True)
class RestartPolicy:
    """When and how often a failed engine is replaced (settings `ENGINE_RESTART_*`)."""

    enabled: bool = True
    max_restarts: int = 5
    """Restarts allowed within `window_seconds`; one more failure and the model is FAILED."""
    window_seconds: float = 600.0
    backoff_seconds: float = 1.0
    """Wait before the first restart in the window; doubled for each further one."""
    max_backoff_seconds: float = 60.0
    check_interval_seconds: float = 0.25
    """How often the engine's health flag and progress are read (cheap: no round trip)."""
    probe_interval_seconds: float = 10.0
    """How often the engine is asked for a round trip (0: never); catches a hung engine."""
    probe_timeout_seconds: float = 30.0
    """An idle engine that does not answer within this is hung; a busy one may not answer
    until its step ends (app/repository/liveness.py)."""
    stall_seconds: float = 300.0
    """A busy engine that leaves probes unanswered and has not stepped for this long is hung."""
    migrate_requests: bool = True
    """Running requests of a failed engine wait for its replacement and resume there."""
    migration_wait_seconds: float = 300.0
    """How long a request waits for the replacement engine before it ends with the error."""


class RestartBudget:
    """The restarts of one instance's engine within the policy's sliding window."""

    def __init__(self, policy: RestartPolicy) -> None:
        self._policy = policy
        self._restarts: deque[float] = deque()

    def _recent(self) -> int:
        horizon = time.monotonic() - self._policy.window_seconds
        while self._restarts and self._restarts[0] < horizon:
            self._restarts.popleft()
        return len(self._restarts)

    def exhausted(self) -> bool:
        return not self._policy.enabled or self._recent() >= self._policy.max_restarts

    def next_delay(self) -> float:
        """The backoff before the next restart: doubled per restart already in the window."""
        delay = self._policy.backoff_seconds * 2.0 ** self._recent()
        return min(delay, self._policy.max_backoff_seconds)

    def record(self) -> None:
        self._restarts.append(time.monotonic())


class EngineSupervisor:
    """Watches the engine of one instance of a model version (its `slot`; the model's only
    one by default); replaces it when it fails, and hands the new one over to the requests
    that were running on the old (an `EngineHandover`)."""

    def __init__(
        self,
        model: ServedModel,
        factory: EngineFactory,
        policy: RestartPolicy,
        on_restart: RestartListener,
        on_migration: MigrationListener | None = None,
        slot: InstanceSlot | None = None,
    ) -> None:
        self._model = model
        self._slot = slot or model.slots[0]
        self._who = f"model '{model.name}' version {model.version}"
        """How the logs name the instance (the model alone when it has one instance)."""
        if len(model.slots) > 1:
            self._who += f" instance {self._slot.instance.name}"
        self._factory = factory
        self._policy = policy
        self._on_restart = on_restart
        self._on_migration = on_migration
        self._budget = RestartBudget(policy)
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        """Set (and replaced) whenever the engine was replaced or will not be."""

    def start(self) -> None:
        name = f"supervise {self._model.name}/{self._model.version}"
        if len(self._model.slots) > 1:
            name += f"/{self._slot.instance.index}"
        self._hand_over(self._slot.engine)
        self._task = asyncio.get_running_loop().create_task(self._supervise(), name=name)

    async def stop(self) -> None:
        """Stop watching (unload, reload, shutdown); an engine being started is stopped too,
        and requests waiting for a replacement end with their error."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        self._notify()

    async def replacement(self, failed: InferenceEngine) -> InferenceEngine | None:
        """The engine that replaced `failed`, once ready; None when restarts are exhausted or
        off, supervision stopped, or `migration_wait_seconds` passed first."""
        if not self._policy.migrate_requests:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._policy.migration_wait_seconds
        while True:
            slot = self._slot
            if slot.engine is not failed and slot.is_ready:
                return slot.engine
            remaining = deadline - loop.time()
            if (
                self._task is None
                or self._task.done()
                or slot.state is ModelState.FAILED
                or remaining <= 0
            ):
                return None
            changed = self._changed
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, WAIT_RECHECK_SECONDS))

    def count_migration(self) -> None:
        if self._on_migration is not None:
            self._on_migration(self._model)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _hand_over(self, engine: InferenceEngine) -> None:
        """Have `engine`'s running requests wait for its replacement, should it die."""
        if self._policy.migrate_requests and isinstance(engine, MigratableEngine):
            engine.handover = self

    async def _supervise(self) -> None:
        try:
            while True:
                cause = await self._wait_for_failure()
                with (
                    thawed_heap()
                ):  # the failed engine's objects are collected, the new one's frozen
                    if not await self._recover(cause):
                        return
        finally:
            self._notify()

    async def _wait_for_failure(self) -> str:
        """Return why the engine is no longer fit to serve, as soon as that is known: its
        process died, or it is hung (app/repository/liveness.py). A slow step is no failure."""
        policy = self._policy
        engine = self._slot.engine
        watch = ProgressWatch(engine, policy.stall_seconds)
        probing = (
            asyncio.create_task(self._probe(engine, watch))
            if policy.probe_interval_seconds
            else None
        )
        try:
            while True:
                await asyncio.sleep(policy.check_interval_seconds)
                if not engine.is_healthy:
                    return "the engine died"
                watch.check()
                if probing is not None and probing.done():
                    return probing.result()
        finally:
            if probing is not None:
                await cancel_and_wait(probing)

    async def _probe(self, engine: InferenceEngine, watch: ProgressWatch) -> str:
        """Ask for a round trip every probe interval; return once an unanswered one shows the
        engine hung."""
        policy = self._policy
        while True:
            await asyncio.sleep(policy.probe_interval_seconds)
            mark = watch.mark()
            try:
                await engine.ping(policy.probe_timeout_seconds)
            except ServerError as exc:
                if not engine.is_healthy:
                    return "the engine died"
                verdict = watch.judge_unanswered(mark)
                if verdict is not None:
                    return f"the engine failed its health probe ({exc.message}): {verdict}"
                logger.debug("%s: the engine is busy stepping; probe unanswered", self._who)

    async def _recover(self, cause: str) -> bool:
        """Replace the failed engine; False when the restart budget is spent (FAILED)."""
        model, slot = self._model, self._slot
        slot.state = ModelState.RESTARTING
        logger.error("%s: %s", self._who, cause)
        await stop_quietly(slot.engine)
        while not self._budget.exhausted():
            delay = self._budget.next_delay()
            logger.warning(
                "%s: restarting its engine in %.1f s (cause: %s)", self._who, delay, cause
            )
            await asyncio.sleep(delay)
            self._budget.record()
            engine = await self._start_engine()
            if engine is not None:
                self._hand_over(engine)
                slot.engine = engine
                slot.state = ModelState.READY
                self._notify()
                self._on_restart(model, cause)
                logger.warning("%s: engine restarted, ready", self._who)
                return True
        slot.state = ModelState.FAILED
        self._notify()
        logger.error(
            "%s: engine restarts exhausted (%d within %.0f s): the server is not live",
            self._who,
            self._policy.max_restarts,
            self._policy.window_seconds,
        )
        return False

    async def _start_engine(self) -> InferenceEngine | None:
        try:
            engine = self._factory(self._model.spec.for_instance(self._slot.instance))
        except Exception:
            logger.exception("%s: creating a new engine failed", self._who)
            return None
        try:
            await engine.start()
        except Exception:
            logger.exception("%s: the new engine failed to start", self._who)
            await stop_quietly(engine)
            return None
        except asyncio.CancelledError:
            await stop_quietly(engine)
            raise
        return engine


async def stop_quietly(engine: InferenceEngine) -> None:
    """Shut an engine down, logging (not raising) a failure to stop."""
    try:
        await engine.shutdown()
    except Exception:
        logger.exception("an engine failed to stop")
