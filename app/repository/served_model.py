"""One served model version: its instances' engines, its state, the requests it admitted and
the instance each one was routed to."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum

from app.core.kv_index import KvBlockIndex, prompt_keys
from app.core.load_view import PendingCount, signals_of
from app.core.routing import (
    InstanceRouter,
    InstanceView,
    LoadView,
    RouteHint,
    RoutingMode,
    load_score,
    pinned_index,
    prefix_key,
)
from app.core.types import InferenceEngine
from app.errors import EngineUnhealthyError, ModelUnavailableError, OverloadedError
from app.repository.instances import ModelInstance
from app.repository.layout import ModelSpec

logger = logging.getLogger(__name__)

ENABLE_VLLM_HEALTH_CHECK = "ENABLE_VLLM_HEALTH_CHECK"
ABORT_GRACE_SECONDS = 5.0
THREAD_TOKENIZE_CHARS = 4096
"""cache_aware: a prompt whose part to tokenize is longer than this is tokenized in a worker
thread, off the event loop."""
CHARS_PER_TOKEN = 6
"""About how many of a prompt's characters make the tokens routing looks at (engines tokenize
that many characters a token wanted, first)."""
SHUTDOWN_MESSAGE = "Request aborted: the server is shutting down"


class ModelState(str, Enum):
    LOADING = "LOADING"
    READY = "READY"
    RESTARTING = "RESTARTING"
    """Its engine failed; a new one is being started (app/repository/supervision.py). A model
    is RESTARTING while none of its instances is ready."""
    FAILED = "FAILED"
    """Its engine failed and may not be restarted any more: the server is not live. A model
    is FAILED once one of its instances is."""
    UNLOADING = "UNLOADING"
    DRAINING = "DRAINING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(eq=False)
class InstanceSlot:
    """One instance of a model version: its engine (replaced when it fails), its state, how
    many admitted requests were routed to it, and how many since its engine's last report."""

    instance: ModelInstance
    engine: InferenceEngine
    state: ModelState = ModelState.LOADING
    admitted: int = 0
    pending: PendingCount = field(default_factory=PendingCount)

    @property
    def is_ready(self) -> bool:
        return self.state is ModelState.READY and self.engine.is_healthy


class ServedModel:
    """One model version, its instances and the requests it is running (a `ServingModel`).

    `engine` for a model of one instance, `engines` (one per instance of the spec's plan)
    otherwise. `max_pending`: admitted requests (running + queued) beyond which new ones are
    refused; None: the engines' own capacity (`request_capacity`); 0: no limit. `allow_pin`:
    a request may name its instance (`RouteHint.pin`)."""

    def __init__(
        self,
        spec: ModelSpec,
        engine: InferenceEngine | None = None,
        state: ModelState = ModelState.LOADING,
        max_pending: int | None = None,
        *,
        engines: Sequence[InferenceEngine] = (),
        allow_pin: bool = False,
    ) -> None:
        engines = [engine] if engine is not None else list(engines)
        plan = spec.instance_plan
        if len(engines) != len(plan):
            raise ValueError(f"{len(plan)} instances of '{spec.name}', {len(engines)} engines")
        self.spec = spec
        self.slots = [
            InstanceSlot(instance, engine, state)
            for instance, engine in zip(plan, engines, strict=True)
        ]
        self._state = state
        self.max_pending = max_pending
        self.allow_pin = allow_pin
        self.router = InstanceRouter(spec.routing)
        self.in_flight: dict[str, bool] = {}
        """Admitted request ids -> whether the server aborted them."""
        self._slot_of_request: dict[str, InstanceSlot] = {}
        """Admitted request ids -> the instance that runs each (a drain aborts it there)."""
        self._idle = asyncio.Event()
        self._idle.set()
        self.replacement: ServedModel | None = None
        """The version that took its place in a reload (set as it retires): requests that
        found this one before the reload ended, and are admitted after, go there (not a 503)."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def version(self) -> str:
        return self.spec.version

    @property
    def state(self) -> ModelState:
        """Its lifecycle state; while READY, as its instances make it: FAILED once one of
        them failed for good, RESTARTING while none is ready."""
        if self._state is not ModelState.READY:
            return self._state
        states = {slot.state for slot in self.slots}
        if ModelState.FAILED in states:
            return ModelState.FAILED
        if ModelState.READY not in states:
            return ModelState.RESTARTING
        return ModelState.READY

    @state.setter
    def state(self, state: ModelState) -> None:
        self._state = state

    @property
    def engine(self) -> InferenceEngine:
        """An engine of the model (the first ready instance's): for what every instance has
        alike (context length, images, OpenAI API); requests are routed (`admit`)."""
        for slot in self.slots:
            if slot.is_ready:
                return slot.engine
        return self.slots[0].engine

    @property
    def engines(self) -> list[InferenceEngine]:
        return [slot.engine for slot in self.slots]

    @property
    def admission_limit(self) -> int | None:
        """The most requests admitted at once (None: no limit)."""
        if self.max_pending is not None:
            return self.max_pending or None
        return sum(slot.engine.request_capacity or 0 for slot in self.slots) or None

    @property
    def is_ready(self) -> bool:
        return self.state is ModelState.READY and any(slot.is_ready for slot in self.slots)

    @property
    def is_healthy(self) -> bool:
        """An engine of the model can serve (vLLM's /health)."""
        return any(slot.engine.is_healthy for slot in self.slots)

    @property
    def num_unfinished_requests(self) -> int:
        """Requests its engines hold, by their own count."""
        return sum(slot.engine.num_unfinished_requests for slot in self.slots)

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

    async def route(self, hint: RouteHint | None = None) -> InstanceSlot:
        """The instance a request goes to: the one it pins (where allowed; a 400 for no such
        instance), else one of the ready ones as the model's routing policy chooses."""
        hint = hint or RouteHint()
        if hint.pin is not None and self.allow_pin:
            slot = self.slots[pinned_index(hint.pin, len(self.slots), self.name)]
            if not slot.is_ready:
                raise EngineUnhealthyError()
            return slot
        if len(self.slots) == 1:
            return self.slots[0]
        ready = [slot for slot in self.slots if slot.is_ready]
        if not ready:
            raise EngineUnhealthyError()
        key, prompts = None, {}
        policy = self.router.policy
        if policy.mode is RoutingMode.PREFIX:
            tokens = hint.token_ids
            if tokens is None:
                tokens = ready[0].engine.prefix_tokens(hint.text, policy.tokens)
            key = prefix_key(tokens, hint.adapter, policy.tokens)
        elif policy.mode is RoutingMode.CACHE_AWARE:
            prompts = await self._prompt_in_caches(ready, hint)
        now = time.monotonic()
        cached = {
            index: cache.match(keys, now) * cache.block_size
            for index, (cache, keys) in prompts.items()
        }
        loads = {slot.instance.index: load_score(self._view(slot)) for slot in ready}
        slot = self.slots[self.router.choose(loads, key, cached)]
        slot.pending.count += 1
        if slot.instance.index in prompts:
            cache, keys = prompts[slot.instance.index]
            cache.expect(keys, now)
        return slot

    def _view(self, slot: InstanceSlot) -> InstanceView:
        """What routing knows of a ready instance: its engine's latest report (where it
        reports, and the model routes by it) and what this process sent it since."""
        signals = signals_of(slot.engine)
        if signals is None or self.router.policy.load_view is LoadView.PROCESS:
            return InstanceView(slot.admitted)
        report = signals.board.read()
        return InstanceView(slot.admitted, report, slot.pending.since(report), signals.clients)

    async def _prompt_in_caches(
        self, ready: Sequence[InstanceSlot], hint: RouteHint
    ) -> dict[int, tuple[KvBlockIndex, list[int]]]:
        """cache_aware: each ready instance's KV-cache index and the prompt's leading block
        keys as that index matches them (none where no engine says what its cache holds)."""
        caches = {}
        for slot in ready:
            signals = signals_of(slot.engine)
            if signals is not None and signals.cache is not None and signals.cache.block_size:
                caches[slot.instance.index] = signals.cache
        if not caches:
            return {}
        limit = self.router.policy.tokens
        tokens = hint.token_ids
        if tokens is None:
            tokens = await prompt_tokens(ready[0].engine, hint, limit)
        return {
            index: (
                cache,
                prompt_keys(tokens, cache.block_size, hint.adapter, limit // cache.block_size),
            )
            for index, cache in caches.items()
        }

    @asynccontextmanager
    async def admit(
        self, request_id: str, route: RouteHint | None = None
    ) -> AsyncIterator[InferenceEngine]:
        """Admit a request, route it to an instance and count it as in flight there for as
        long as it runs; yields that instance's engine.

        The one readiness check of a request. Beyond `admission_limit` admitted requests
        the answer is an `OverloadedError` (a 503 with Retry-After, before any output). With
        ENABLE_VLLM_HEALTH_CHECK the engine is checked first, as the backend does (a failed
        engine is the supervisor's to replace). A request the server aborted (drain, unload)
        ends with an error instead of its partial output. Once a reload replaced the
        version, a request is admitted to its `replacement`.
        """
        if self.replacement is not None:
            async with self.replacement.admit(request_id, route) as engine:
                yield engine
            return
        self.ensure_ready()
        limit = self.admission_limit
        if limit is not None and len(self.in_flight) >= limit:
            raise OverloadedError(
                f"Model '{self.name}' is overloaded: {len(self.in_flight)} "
                f"requests pending; retry later"
            )
        slot = await self.route(route)
        slot.admitted += 1
        try:
            if self.spec.flag(ENABLE_VLLM_HEALTH_CHECK):
                await slot.engine.check_health()
            async with self._in_flight(request_id, slot):
                yield slot.engine
        finally:
            slot.admitted -= 1

    @asynccontextmanager
    async def _in_flight(self, request_id: str, slot: InstanceSlot) -> AsyncIterator[None]:
        self.in_flight[request_id] = False
        self._slot_of_request[request_id] = slot
        self._idle.clear()
        try:
            yield
            if self.in_flight[request_id]:
                raise ModelUnavailableError(SHUTDOWN_MESSAGE)
        finally:
            del self.in_flight[request_id]
            self._slot_of_request.pop(request_id, None)
            if not self.in_flight:
                self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight; False if `timeout` seconds pass first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def drain(self, timeout: float) -> None:
        """Let running requests finish for `timeout` s, then abort the rest (each on the engine
        of its instance); new requests are refused by the state the caller set first."""
        running, began = len(self.in_flight), time.monotonic()
        if await self.wait_idle(timeout):
            if running:
                logger.info(
                    "model '%s' version %s: drained, its %d running requests finished in %.1f s",
                    self.name,
                    self.version,
                    running,
                    time.monotonic() - began,
                )
            return
        logger.warning(
            "model '%s' version %s: aborting %d requests still running after %.0f s",
            self.name,
            self.version,
            len(self.in_flight),
            timeout,
        )
        for request_id in list(self.in_flight):
            self.in_flight[request_id] = True
            slot = self._slot_of_request.get(request_id)
            if slot is not None:
                await slot.engine.abort(request_id)
        await self.wait_idle(ABORT_GRACE_SECONDS)


async def prompt_tokens(engine: InferenceEngine, hint: RouteHint, limit: int) -> Sequence[int]:
    """The first `limit` tokens of the prompt as the engine will see it (wrapped in the chat
    template where the request asks for it); a long one tokenized in a worker thread; none
    where the tokenizer fails (a Rust tokenizer used by another thread may refuse)."""

    def tokenize() -> Sequence[int]:
        text = engine.render_chat_prompt(hint.text) if hint.chat_template else hint.text
        try:
            return engine.prefix_tokens(text, limit)
        except Exception:  # e.g. a tokenizer another thread holds: route by load alone
            logger.debug("the prompt could not be tokenized for routing", exc_info=True)
            return ()

    if min(len(hint.text), limit * CHARS_PER_TOKEN) > THREAD_TOKENIZE_CHARS:
        return await asyncio.to_thread(tokenize)
    return tokenize()


def hand_over(
    retiring: Sequence[ServedModel], fresh: Sequence[ServedModel]
) -> dict[str, ServedModel]:
    """A reload beside: the fresh versions by number. Each retiring version's requests not
    yet admitted go to the fresh one of its number (one the new config drops has none: 503)."""
    by_version = {served.version: served for served in fresh}
    for served in retiring:
        served.replacement = by_version.get(served.version)
    return by_version
