"""Engines that heal themselves: each served model version's engine is watched, and a failed
one is replaced with exponential backoff, within a budget of restarts per time window."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from app.core.types import InferenceEngine
from app.errors import ServerError
from app.repository.heap import thawed_heap
from app.repository.layout import ModelSpec
from app.repository.served_model import ModelState, ServedModel

logger = logging.getLogger(__name__)

EngineFactory = Callable[[ModelSpec], InferenceEngine]
RestartListener = Callable[[ServedModel, str], None]
"""Told of each successful restart: the model and the cause of the failure."""


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
    """How often the engine's own health flag is read (cheap: no round trip)."""
    probe_interval_seconds: float = 10.0
    """How often the engine must answer a round trip (0: never); catches a hung engine."""
    probe_timeout_seconds: float = 30.0


class RestartBudget:
    """The restarts of one model version within the policy's sliding window."""

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
        delay = self._policy.backoff_seconds * 2 ** self._recent()
        return min(delay, self._policy.max_backoff_seconds)

    def record(self) -> None:
        self._restarts.append(time.monotonic())


class EngineSupervisor:
    """Watches one model version's engine; replaces it when it fails."""

    def __init__(
        self, model: ServedModel, factory: EngineFactory, policy: RestartPolicy, on_restart: RestartListener
    ) -> None:
        self._model = model
        self._factory = factory
        self._policy = policy
        self._on_restart = on_restart
        self._budget = RestartBudget(policy)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        name = f"supervise {self._model.name}/{self._model.version}"
        self._task = asyncio.get_running_loop().create_task(self._supervise(), name=name)

    async def stop(self) -> None:
        """Stop watching (unload, reload, shutdown); an engine being started is stopped too."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _supervise(self) -> None:
        while True:
            cause = await self._wait_for_failure()
            with thawed_heap():  # the failed engine's objects are collected, the new one's frozen
                if not await self._recover(cause):
                    return

    async def _wait_for_failure(self) -> str:
        """Return why the engine is no longer fit to serve, as soon as that is known."""
        policy = self._policy
        next_probe = time.monotonic() + policy.probe_interval_seconds
        while True:
            await asyncio.sleep(policy.check_interval_seconds)
            engine = self._model.engine
            if not engine.is_healthy:
                return "the engine died"
            if policy.probe_interval_seconds and time.monotonic() >= next_probe:
                try:
                    await engine.ping(policy.probe_timeout_seconds)
                except ServerError as exc:
                    return f"the engine failed its health probe: {exc.message}"
                next_probe = time.monotonic() + policy.probe_interval_seconds

    async def _recover(self, cause: str) -> bool:
        """Replace the failed engine; False when the restart budget is spent (FAILED)."""
        model = self._model
        model.state = ModelState.RESTARTING
        logger.error("model '%s' version %s: %s", model.name, model.version, cause)
        await stop_quietly(model.engine)
        while not self._budget.exhausted():
            delay = self._budget.next_delay()
            logger.warning(
                "model '%s' version %s: restarting its engine in %.1f s (cause: %s)",
                model.name, model.version, delay, cause,
            )
            await asyncio.sleep(delay)
            self._budget.record()
            engine = await self._start_engine()
            if engine is not None:
                model.engine = engine
                model.state = ModelState.READY
                self._on_restart(model, cause)
                logger.warning("model '%s' version %s: engine restarted, ready", model.name, model.version)
                return True
        model.state = ModelState.FAILED
        logger.error(
            "model '%s' version %s: engine restarts exhausted (%d within %.0f s): the server is not live",
            model.name, model.version, self._policy.max_restarts, self._policy.window_seconds,
        )
        return False

    async def _start_engine(self) -> InferenceEngine | None:
        try:
            engine = self._factory(self._model.spec)
        except Exception:
            logger.exception("model '%s': creating a new engine failed", self._model.name)
            return None
        try:
            await engine.start()
        except Exception:
            logger.exception("model '%s' version %s: the new engine failed to start", self._model.name, self._model.version)
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
