"""One request's outputs from vLLM's `AsyncLLM.generate`, carried over to the model's next
engine when its engine dies: the request waits for the replacement (the engine's
`handover`, app/repository/supervision.py) and resumes there from the tokens its client
already received, so that its client sees one uninterrupted stream (app/core/migration.py
keeps the books). Both the Triton path (`VllmEngine.generate`) and vLLM's OpenAI serving code
(`GuardedRequest`) read their outputs through it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Iterable
from typing import Any, Protocol, TypeVar

from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.exceptions import EngineDeadError

from app.core.migration import EngineHandover, RequestProgress, Resumption
from app.errors import EngineFaultError

logger = logging.getLogger(__name__)

T = TypeVar("T")

RESUMED_KWARGS = frozenset({"lora_request", "trace_headers", "priority"})
"""`generate` arguments a resumed request keeps (the others concern the original prompt)."""


class ResumableEngine(Protocol):
    """What a request needs of the engine it runs on (`VllmEngine`)."""

    handover: EngineHandover | None

    @property
    def llm(self) -> Any | None:
        """The engine's `AsyncLLM` (None once stopped)."""
        ...

    def track(self, admitted_id: str, engine_ids: Iterable[str]) -> None:
        """Know these engine requests as the admitted request's (a drain aborts them)."""
        ...

    def untrack(self, admitted_id: str, engine_ids: Iterable[str]) -> None: ...


def can_migrate(params: Any) -> bool:
    """Whether a request's outputs can be followed across engines (DELTA or FINAL_ONLY)."""
    return params.output_kind in (RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY)


class ResumingRequest:
    """`llm.engine_generate(prompt, params, request_id, **kwargs)` on `engine`, resumed on its
    replacement each time it dies (as long as the request can resume). A FINAL_ONLY request
    runs as DELTA underneath (so that what it produced is known) and yields one final output."""

    def __init__(
        self,
        engine: ResumableEngine,
        admitted_id: str,
        prompt: Any,
        params: Any,
        request_id: str,
        kwargs: dict[str, Any],
    ) -> None:
        self._engine = engine
        self._admitted_id = admitted_id
        self._prompt = prompt
        self._params = params
        self._request_id = request_id
        self._kwargs = kwargs
        self._final_only = params.output_kind == RequestOutputKind.FINAL_ONLY
        self._progress = RequestProgress(
            params.n, params.max_tokens, params.min_tokens, params.seed
        )
        self._first: Any = None
        """The first output: the request's own prompt fields, for the resumed ones."""
        self._merged: Any = None
        """FINAL_ONLY: everything so far, merged."""

    async def outputs(self) -> AsyncGenerator[Any, None]:
        engine = self._engine
        tracked: list[str] = []
        streams = self._start(engine, tracked)
        try:
            while True:
                try:
                    async for output in streams:
                        result = self._take(output)
                        if result is not None:
                            yield result
                    return
                except EngineDeadError as exc:
                    await streams.aclose()
                    engine.untrack(self._admitted_id, tracked)
                    engine = await self._successor(engine, exc)
                    tracked = []
                    streams = self._start(engine, tracked)
        finally:
            await streams.aclose()
            engine.untrack(self._admitted_id, tracked)

    def _start(self, engine: ResumableEngine, tracked: list[str]) -> AsyncGenerator[Any, None]:
        """The request's engine streams on `engine`: the whole request when nothing was
        produced yet, else one per unfinished completion."""
        llm = engine.llm
        if llm is None:
            return failed_stream(EngineDeadError())
        if self._progress.restarts_whole():
            params = self._params
            if self._final_only:
                params = params.clone()
                params.output_kind = RequestOutputKind.DELTA
            if engine is not self._engine:
                tracked.append(self._request_id)
                engine.track(self._admitted_id, tracked)
            stream: AsyncGenerator[Any, None] = llm.engine_generate(
                self._prompt, params, self._request_id, **self._kwargs
            )
            return stream
        resumptions = self._progress.resumptions()
        kwargs = {key: value for key, value in self._kwargs.items() if key in RESUMED_KWARGS}
        streams = []
        for resumption in resumptions:
            engine_id = (
                self._request_id
                if len(resumptions) == 1
                else f"{self._request_id}-n{resumption.index}"
            )
            tracked.append(engine_id)
            prompt = self._resumed_prompt(resumption)
            outputs = llm.engine_generate(
                prompt, self._resumed_params(resumption), engine_id, **kwargs
            )
            streams.append(as_completion(outputs, resumption.index))
        engine.track(self._admitted_id, tracked)
        return merged(streams)

    def _resumed_prompt(self, resumption: Resumption) -> dict[str, Any]:
        assert self._progress.prompt_token_ids is not None
        token_ids = self._progress.prompt_token_ids + resumption.token_ids
        prompt: dict[str, Any] = {"prompt_token_ids": token_ids}
        if isinstance(self._prompt, dict) and self._prompt.get("type") == "token":
            prompt["type"] = "token"
            if self._prompt.get("cache_salt") is not None:
                prompt["cache_salt"] = self._prompt["cache_salt"]
        return prompt

    def _resumed_params(self, resumption: Resumption) -> Any:
        params = self._params.clone()
        params.n = 1
        params.max_tokens = resumption.max_tokens
        params.min_tokens = resumption.min_tokens
        params.seed = resumption.seed
        params.output_kind = RequestOutputKind.DELTA
        params.prompt_logprobs = None
        return params

    def _resumable(self) -> bool:
        """A request whose outputs depend on state the engine keeps beyond its tokens (a
        grammar, images, a thinking budget) resumes only while it has produced nothing."""
        if self._progress.restarts_whole():
            return True
        if self._progress.prompt_token_ids is None:
            return False
        params = self._params
        if params.structured_outputs is not None or getattr(params, "thinking_token_budget", None):
            return False
        prompt = self._prompt
        if not isinstance(prompt, dict):
            return isinstance(prompt, str)
        return not prompt.get("multi_modal_data") and prompt.get("type") in (None, "token")

    async def _successor(self, failed: ResumableEngine, error: EngineDeadError) -> ResumableEngine:
        """The engine that replaced `failed`, or the request's error when it cannot resume."""
        handover = failed.handover
        if handover is None:
            raise error
        if not self._progress.can_resume():
            logger.error(
                "request %s: its engine died again while running it; it is not resumed again",
                self._request_id,
            )
            raise EngineFaultError() from error
        if not self._resumable():
            raise error
        logger.warning(
            "request %s: its engine died; it waits for the replacement engine (%d tokens produced)",
            self._request_id,
            self._progress.produced,
        )
        successor = await handover.replacement(failed)
        if successor is None:
            logger.error(
                "request %s: no replacement engine in time; it ends with the error",
                self._request_id,
            )
            raise error
        handover.count_migration()
        self._progress.resumed()
        logger.warning("request %s resumes on the replacement engine", self._request_id)
        return successor  # type: ignore[no-any-return]

    def _take(self, output: Any) -> Any:
        """Record one output and rewrite it as a continuation of the client's request;
        None while a FINAL_ONLY request is not finished."""
        progress = self._progress
        if self._first is None:
            self._first = output
            progress.prompt_token_ids = list(output.prompt_token_ids or ())
        elif progress.resumes:
            first = self._first
            output.request_id = first.request_id
            output.prompt = first.prompt
            output.prompt_token_ids = first.prompt_token_ids
            output.num_cached_tokens = first.num_cached_tokens
            output.prompt_logprobs = None
        for completion in output.outputs:
            completion.cumulative_logprob = progress.record(
                completion.index,
                completion.token_ids,
                completion.cumulative_logprob,
                completion.finish_reason is not None,
            )
        output.finished = progress.finished
        if not self._final_only:
            return output
        if self._merged is None:
            self._merged = output
        elif self._merged is not output:
            self._merged.add(output, aggregate=True)
        if not progress.finished:
            return None
        self._merged.outputs.sort(key=lambda completion: completion.index)
        return self._merged


async def as_completion(
    outputs: AsyncGenerator[Any, None], index: int
) -> AsyncGenerator[Any, None]:
    """A resumed completion's outputs (its own request, n = 1) under the completion's index."""
    try:
        async for output in outputs:
            for completion in output.outputs:
                completion.index = index
            yield output
    finally:
        await outputs.aclose()


async def failed_stream(error: Exception) -> AsyncGenerator[Any, None]:
    raise error
    yield  # pragma: no cover - makes this an async generator


async def merged(iterators: list[AsyncGenerator[T, None]]) -> AsyncGenerator[T, None]:
    """The items of several async iterators as they come; closing it (or one failing)
    closes them all."""
    if len(iterators) == 1:
        try:
            async for item in iterators[0]:
                yield item
        finally:
            await iterators[0].aclose()
        return
    pending = {asyncio.ensure_future(anext(it)): it for it in iterators}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                iterator = pending.pop(task)
                try:
                    item = task.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(anext(iterator))] = iterator
                yield item
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for iterator in iterators:
            await iterator.aclose()
