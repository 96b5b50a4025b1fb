"""One served model version: its engine, its state, and the requests it admitted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum

from app.core.types import InferenceEngine
from app.errors import EngineUnhealthyError, ModelUnavailableError, OverloadedError
from app.repository.layout import ModelSpec

logger = logging.getLogger(__name__)

ENABLE_VLLM_HEALTH_CHECK = "ENABLE_VLLM_HEALTH_CHECK"
ABORT_GRACE_SECONDS = 5.0
SHUTDOWN_MESSAGE = "Request aborted: the server is shutting down"


class ModelState(str, Enum):
    LOADING = "LOADING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    """Its engine failed; a new one is being started (app/repository/supervision.py)."""
    FAILED = "FAILED"
    """Its engine failed and may not be restarted any more: the server is not live."""
    UNLOADING = "UNLOADING"
    DRAINING = "DRAINING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass
class ServedModel:
    """One model version, its engine, and the requests it is running (a `ServingModel`)."""

    spec: ModelSpec
    engine: InferenceEngine
    state: ModelState = ModelState.LOADING
    max_pending: int | None = None
    in_flight: dict[str, bool] = field(default_factory=dict)
    """Admitted request ids -> whether the server aborted them."""
    _idle: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def __post_init__(self) -> None:
        self._idle.set()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def version(self) -> str:
        return self.spec.version

    @property
    def is_ready(self) -> bool:
        return self.state is ModelState.READY and self.engine.is_healthy

    def ensure_ready(self) -> None:
        """Raise the error a request to this model gets when it cannot be served."""
        if self.state is ModelState.LOADING:
            raise ModelUnavailableError(f"Model '{self.name}' version {self.version} is loading")
        if self.state is ModelState.UNLOADING:
            raise ModelUnavailableError(f"Model '{self.name}' version {self.version} is unloading")
        if self.state is ModelState.DRAINING:
            raise ModelUnavailableError("Server is shutting down: no new requests are admitted")
        if not self.is_ready:
            raise EngineUnhealthyError()

    @asynccontextmanager
    async def admit(self, request_id: str) -> AsyncIterator[None]:
        """Admit a request and count it as in flight for as long as it runs.

        The one readiness check of a request. Beyond `max_pending` admitted requests the
        answer is an `OverloadedError`. With ENABLE_VLLM_HEALTH_CHECK the engine is checked
        first, as the backend does (a failed engine is the supervisor's to replace). A request
        the server aborted (drain, unload) ends with an error instead of its partial output.
        """
        self.ensure_ready()
        if self.max_pending is not None and len(self.in_flight) >= self.max_pending:
            raise OverloadedError(
                f"Model '{self.name}' is overloaded: {len(self.in_flight)} requests pending; retry later"
            )
        if self.spec.flag(ENABLE_VLLM_HEALTH_CHECK):
            await self.engine.check_health()
        self.in_flight[request_id] = False
        self._idle.clear()
        try:
            yield
            if self.in_flight[request_id]:
                raise ModelUnavailableError(SHUTDOWN_MESSAGE)
        finally:
            del self.in_flight[request_id]
            if not self.in_flight:
                self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight; False if `timeout` seconds pass first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def drain(self, state: ModelState, timeout: float) -> None:
        """Stop admitting; let running requests finish for `timeout` s, then abort the rest."""
        self.state = state
        if await self.wait_idle(timeout):
            return
        logger.warning(
            "model '%s' version %s: aborting %d requests still running after %.0f s",
            self.name, self.version, len(self.in_flight), timeout,
        )
        for request_id in list(self.in_flight):
            self.in_flight[request_id] = True
            await self.engine.abort(request_id)
        await self.wait_idle(ABORT_GRACE_SECONDS)
