"""One OpenAI request while vLLM's serving classes serve it: every engine request they start
for it runs through the request's guard (limits, observation, deadline), is known by the
request's admitted id (a drain aborts it), has its grammar checked and its acceptance watched.

vLLM's serving objects are built once per engine, on the engine itself
(`AcceptingAsyncLLM`); the request they serve is bound to the context they run in
(`serving`, `bound`), and the engine's `generate` runs through it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from vllm.sampling_params import RequestOutputKind

from app.core.guard import OutputReading, RequestGuard
from app.engine.grammars import ENGINE_ERROR, failure_of, grammar_check
from app.engine.timeline import engine_timeline
from app.engine.vllm_openai.acceptance import Acceptances, acceptance_key
from app.errors import InvalidRequestError, ServerError

__all__ = [
    "SERVED_REQUEST",
    "EngineOutputs",
    "EngineRequests",
    "GuardedRequest",
    "bound",
    "serving",
]

T = TypeVar("T")


class EngineRequests(dict[str, set[str]]):
    """Admitted request id -> the ids of the engine requests it runs (an OpenAI request may
    run several, a resumed request runs on under new ids), for aborting them with it."""

    def track(self, admitted_id: str, engine_ids: Iterable[str]) -> None:
        self.setdefault(admitted_id, set()).update(engine_ids)

    def untrack(self, admitted_id: str, engine_ids: Iterable[str]) -> None:
        known = self.get(admitted_id)
        if known is not None:
            known.difference_update(engine_ids)
            if not known:
                del self[admitted_id]


EngineOutputs = Callable[..., AsyncIterator[Any]]
"""`(admitted_id, prompt, sampling_params, request_id, **kwargs)`: `AsyncLLM.generate` for a
request admitted as `admitted_id` (`VllmEngine.outputs`: resumed on a replacement engine)."""


class GuardedRequest:
    """The OpenAI request vLLM's serving code serves: each engine request it asks for
    (`generate`) runs through the request's guard and is known by the request's admitted id,
    so that a drain can abort it."""

    def __init__(
        self,
        llm: Any,
        guard: RequestGuard,
        requests: EngineRequests,
        generate: EngineOutputs | None = None,
    ) -> None:
        self._llm = llm
        self._guard = guard
        self._requests = requests
        self._generate = generate
        self._grammar_checks: list[asyncio.Future[None]] = []
        self.acceptances = Acceptances(llm)
        """Whether the engine took each engine request (a stream begins once it has)."""
        self.requested = asyncio.Event()
        """Set once vLLM's serving code asked for its first engine request."""

    @property
    def failure(self) -> ServerError | None:
        """Why the core ended one of the request's engine streams early, if it did."""
        return self._guard.failure

    async def grammars_checked(self) -> None:
        """Wait for the grammar checks of the engine requests started so far: a grammar the
        engine cannot use is refused before a stream starts."""
        await asyncio.gather(*self._grammar_checks)

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str, *args: Any, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        """The engine's stream through the guard. A stream the core ends (its deadline) ends
        quietly when it streams to the client: vLLM's stream generator would log it as a
        crash; the frontend reports `guard.failure` in the stream instead."""
        check_integers(sampling_params)
        self.requested.set()
        admitted, engine_ids = self._guard.request_id, (request_id,)
        if self._generate is None:
            outputs = self._llm.engine_generate(
                prompt, sampling_params, request_id, *args, **kwargs
            )
        else:
            outputs = self._generate(admitted, prompt, sampling_params, request_id, *args, **kwargs)
        streaming = getattr(sampling_params, "output_kind", None) == RequestOutputKind.DELTA
        outputs = self.acceptances.watch(acceptance_key(request_id, prompt), outputs, streaming)
        if getattr(sampling_params, "structured_outputs", None) is not None:
            check = asyncio.ensure_future(grammar_check(self._llm).check(sampling_params, ""))
            check.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._grammar_checks.append(check)
            outputs = grammar_checked(check, outputs, sampling_params)
        return self._guard.stream(
            outputs,
            ENGINE_OUTPUTS,
            quiet=streaming,
            on_start=lambda: self._requests.track(admitted, engine_ids),
            on_end=lambda: self._requests.untrack(admitted, engine_ids),
        )


SERVED_REQUEST: ContextVar[GuardedRequest | None] = ContextVar("served_request", default=None)
"""The OpenAI request vLLM's serving code is serving in this context, if any."""


@contextmanager
def serving(request: GuardedRequest) -> Iterator[None]:
    """Within this, the engine's `generate` is `request`'s (vLLM's serving code runs)."""
    token = SERVED_REQUEST.set(request)
    try:
        yield
    finally:
        SERVED_REQUEST.reset(token)


async def bound(
    stream: AsyncGenerator[T, None], request: GuardedRequest
) -> AsyncGenerator[T, None]:
    """`stream` (vLLM's serving code's, read after it returned), each step of it run serving
    `request`: an engine request it asks for only as it is read (the Responses API's) is
    `request`'s too."""
    try:
        while True:
            token = SERVED_REQUEST.set(request)
            try:
                item = await anext(stream)
            except StopAsyncIteration:
                return
            finally:
                SERVED_REQUEST.reset(token)
            yield item
    finally:
        await stream.aclose()


async def grammar_checked(
    check: asyncio.Future[None], outputs: Any, params: Any
) -> AsyncIterator[Any]:
    """The engine's outputs once the request's grammar passed its check; an output the
    engine ended with an error is the request's own fault (its grammar was in play), not an
    internal error."""
    try:
        await check
        async for output in outputs:
            if output.finished and any(c.finish_reason == ENGINE_ERROR for c in output.outputs):
                raise failure_of(params, "")
            yield output
    finally:
        await outputs.aclose()


INT_RANGE = (-(2**63), 2**64 - 1)
"""What the engine's message encoding (msgpack) can carry; a larger integer fails there, after
the engine has registered the request (which then never finishes)."""


def check_integers(sampling_params: Any) -> None:
    """Refuse, naming the field, an integer the engine could not be sent."""
    for name in getattr(sampling_params, "__struct_fields__", ()):
        if not fits(getattr(sampling_params, name, None)):
            raise InvalidRequestError(f"{name}: a number is out of range", param=name)


def fits(value: Any) -> bool:
    if isinstance(value, int):
        return INT_RANGE[0] <= value <= INT_RANGE[1]
    if isinstance(value, (list, tuple, set)):
        return all(fits(item) for item in value)
    if isinstance(value, dict):
        return all(fits(key) and fits(item) for key, item in value.items())
    return True


def token_counts(output: Any) -> tuple[int, int]:
    """A `RequestOutput`'s prompt tokens and new tokens (DELTA or FINAL_ONLY outputs)."""
    return len(output.prompt_token_ids or ()), sum(len(c.token_ids) for c in output.outputs)


ENGINE_OUTPUTS: OutputReading[Any] = OutputReading(token_counts, engine_timeline)
"""vLLM's `RequestOutput`s as the core's loop reads them (vLLM's serving code makes the
responses, so the request's end says when it was complete)."""
