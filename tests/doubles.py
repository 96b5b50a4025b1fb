"""An in-memory engine with the interface of `VllmEngine`, for HTTP-layer unit tests."""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import msgspec

from app.core.chunks import merge_chunks
from app.core.types import CompletionDelta, GenerationChunk, ValidRequest
from app.engine.sampling import to_sampling_params
from app.errors import EngineUnhealthyError, ServerError
from tests.openai_double import FakeOpenAIServing

WORDS = ["Hello", " from", " the", " fake", " engine", "."]
TOKEN_LOGPROB = -0.5


def read_sampling(request: ValidRequest) -> SimpleNamespace:
    """The request's sampling values validated and read as the vLLM engine does, by the engine
    adapter's own conversion (app/engine/sampling.py: a 400 naming the field for a value it
    rejects, defaults filled in, a single stop string a list of one): each public field of
    vLLM's `SamplingParams` by name, for the double to generate by and the tests to look at."""
    params = to_sampling_params(request.sampling, request.stream, request.parameters_field)
    fields = msgspec.structs.asdict(params)
    return SimpleNamespace(**{name: v for name, v in fields.items() if not name.startswith("_")})


@dataclass(frozen=True)
class ReceivedRequest:
    """A request as the engine received it, with its sampling values as vLLM reads them."""

    request_id: str
    prompt: str
    sampling_params: SimpleNamespace
    """Every public `SamplingParams` field by name (`read_sampling`)."""
    images: list[Any]
    lora: Any
    stream: bool
    priority: int = 0

    @classmethod
    def of(cls, request: ValidRequest, params: SimpleNamespace) -> ReceivedRequest:
        return cls(
            request.request_id,
            request.prompt,
            params,
            request.images,
            request.lora,
            request.stream,
            request.priority,
        )


class FakeEngine:
    """Completion `i` emits WORDS[(step + i) % 6], one token per step, honouring
    max_tokens, n, stop strings, logprobs and streaming. Sampling values are validated and
    read as the vLLM engine does (`read_sampling`: the engine adapter's own conversion)."""

    def __init__(
        self,
        *,
        supports_images: bool = False,
        step_delay: float = 0.0,
        fail_after: int | None = None,
        fail_with: Exception | None = None,
        start_delay: float = 0.0,
        start_error: Exception | None = None,
        openai: bool = True,
    ) -> None:
        self.requests: list[ReceivedRequest] = []
        self.active: set[str] = set()
        self.aborted: list[str] = []
        self.abort_calls: list[str] = []
        self.healthy = True
        self.started = False
        self.stopped = False
        self._supports_images = supports_images
        self._step_delay = step_delay
        self._fail_after = fail_after
        self._fail_with = fail_with
        self._start_delay = start_delay
        self._start_error = start_error
        self.ping_hangs = False
        self.ping_waits_for_steps = False
        """A busy engine core answers between two steps: the probe waits while a request runs."""
        self.hung = False
        """Steps stop (a stopped core): requests pending make no progress, pings hang."""
        self.progress = 0
        self.request_capacity: int | None = None
        self.unanswered_pings = 0
        self.handover: Any = None
        """Set by supervision (the double's requests do not resume: they end with the error)."""
        self.start_gate: threading.Event | None = None
        """When set to an event, `start` ends only once the event is set (by a test's thread)."""
        if openai:
            self.openai_serving = FakeOpenAIServing(self)

    @contextmanager
    def held(self, at_most: float = 60.0) -> Iterator[None]:
        """Steps wait (`hung`) until the block ends, or `at_most` seconds pass: the requests
        started in it stay in flight whatever the host's speed, and a request that wrongly
        waits for them ends the test rather than hanging it (`hung` then reads False)."""
        self.hung = True
        release = threading.Timer(at_most, setattr, (self, "hung", False))
        release.daemon = True
        release.start()
        try:
            yield
        finally:
            release.cancel()
            self.hung = False

    async def start(self) -> None:
        await asyncio.sleep(self._start_delay)
        # a thread's event, polled: waiting for it in a worker thread would outlive a cancel
        while self.start_gate is not None and not self.start_gate.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if self._start_error is not None:
            raise self._start_error
        self.started = True

    async def shutdown(self) -> None:
        self.stopped = True

    @property
    def is_healthy(self) -> bool:
        return self.healthy

    @property
    def supports_images(self) -> bool:
        return self._supports_images

    @property
    def max_model_len(self) -> int:
        return 2048

    @property
    def max_logprobs(self) -> int:
        return 20

    def render_chat_prompt(self, text: str) -> str:
        return f"<user>{text}</user><assistant>"

    def prefix_tokens(self, text: str, limit: int) -> list[int]:
        """One token per word, the same in every process."""
        return word_tokens(text)[:limit]

    async def abort(self, request_id: str) -> None:
        self.abort_calls.append(request_id)

    @property
    def num_unfinished_requests(self) -> int:
        return len(self.active)

    async def check_health(self) -> None:
        if not self.healthy:
            raise EngineUnhealthyError()

    async def ping(self, timeout: float) -> None:
        """Like the real engine: an answer within `timeout`, unless told to hang."""
        await self.check_health()
        try:
            await asyncio.wait_for(self._answer(), timeout)
        except asyncio.TimeoutError:
            self.unanswered_pings += 1
            raise EngineUnhealthyError(f"the engine did not answer within {timeout:g} s") from None

    async def _answer(self) -> None:
        # polls the flags, plain attributes that the tests set
        while self.ping_hangs or self.hung or (self.ping_waits_for_steps and self.active):  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    async def generate(self, request: ValidRequest) -> AsyncGenerator[GenerationChunk, None]:
        params = read_sampling(request)
        self.requests.append(ReceivedRequest.of(request, params))
        if self._fail_with is not None and self._fail_after is None:
            raise self._fail_with
        if request.on_accepted is not None:
            request.on_accepted()
        self.active.add(request.request_id)
        try:
            steps = self._steps(request.request_id, params, len(request.prompt.split()))
            if not request.stream:
                yield merge_chunks([chunk async for chunk in steps], params.n)
            else:
                async for chunk in steps:
                    yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            self.aborted.append(request.request_id)
            raise
        finally:
            self.active.discard(request.request_id)

    async def _steps(
        self, request_id: str, params: SimpleNamespace, num_prompt_tokens: int
    ) -> AsyncGenerator[GenerationChunk, None]:
        stops = [params.stop] if isinstance(params.stop, str) else list(params.stop or [])
        running = set(range(params.n))
        cumulative = [0.0] * params.n
        for step in range(params.max_tokens):
            await self._step(step)
            if request_id in self.abort_calls:
                done = [
                    CompletionDelta(index=i, text="", num_tokens=0, finish_reason="abort")
                    for i in sorted(running)
                ]
                yield GenerationChunk(
                    completions=done, num_prompt_tokens=num_prompt_tokens, finished=True
                )
                return
            completions = []
            for index in sorted(running):
                word = WORDS[(step + index) % len(WORDS)]
                finish = None
                if word.strip() in stops:
                    word, finish = "", "stop"
                elif step == params.max_tokens - 1:
                    finish = "length"
                cumulative[index] += TOKEN_LOGPROB
                logprob = cumulative[index] if params.logprobs is not None else None
                completions.append(word_delta(index, step, word, finish, logprob))
                if finish:
                    running.discard(index)
            yield GenerationChunk(
                completions=completions, num_prompt_tokens=num_prompt_tokens, finished=not running
            )
            if not running:
                return

    async def _step(self, step: int) -> None:
        """One engine step: its delay, a hang while `hung` (until stopped), the failure asked
        for at `fail_after`."""
        if self._step_delay:
            await asyncio.sleep(self._step_delay)
        while self.hung:
            if self.stopped:
                raise EngineUnhealthyError()
            await asyncio.sleep(0.01)
        self.progress += 1
        if self._fail_after is not None and step == self._fail_after:
            raise self._fail_with or ServerError("engine failed")


def word_delta(
    index: int, step: int, word: str, finish: str | None, cumulative_logprob: float | None
) -> CompletionDelta:
    """Completion `index`'s token of `step`, with its logprobs when `cumulative_logprob` is
    given (the request asked for logprobs)."""
    logprobs = None
    if cumulative_logprob is not None:
        logprobs = [{100 + step: {"logprob": TOKEN_LOGPROB, "rank": 1, "decoded_token": word}}]
    return CompletionDelta(
        index=index,
        text=word,
        num_tokens=1,
        cumulative_logprob=cumulative_logprob,
        logprobs=logprobs,
        finish_reason=finish,
    )


def word_tokens(text: str) -> list[int]:
    """The double's tokenizer: each word's CRC-32."""
    return [zlib.crc32(word.encode()) for word in text.split()]
