"""Protocol-neutral data of one generation, and the interfaces the core runs it through."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.core.routing import RouteHint
from app.core.timing import EngineTimeline

TokenLogprobs = dict[int, dict[str, Any]]
"""One generated position: token id -> {"logprob", "rank", "decoded_token"}."""


@dataclass(frozen=True, slots=True)
class LoraAdapter:
    """A LoRA adapter of a model: its name, the engine's integer id for it, and its folder."""

    name: str
    int_id: int
    path: Path


@dataclass(slots=True)
class ValidRequest:
    """One request as every frontend hands it to the core: built once per request by its
    protocol's frontend, which checked it against the server's limits (`check_sampling`).

    `sampling` holds the engine-bound vLLM `SamplingParams` values as the client gave them
    (types checked by the frontend's schema); the engine adapter converts them as a whole.
    What the core itself reads is typed: `n`, `max_tokens` (read once from `sampling`),
    `stream` (the one place the "deltas or one response" choice is made), the adapter, the
    images and the outputs wanted.
    """

    request_id: str
    prompt: str
    sampling: dict[str, Any]
    stream: bool
    chat_template: bool = False
    """Wrap `prompt` as one user turn in the model's chat template before generating."""
    images: list[Any] = field(default_factory=list)
    lora: LoraAdapter | None = None
    outputs: frozenset[str] = frozenset()
    """The outputs the client wants, by its protocol's names (the formatter's business)."""
    parameters_field: str = "parameters"
    """Where the client put `sampling`, so that errors name the field as the client wrote it."""
    on_accepted: Callable[[], None] | None = None
    """Called once the engine has taken the request (every check of it passed), before its
    first chunk: a stream can start then, rather than after the first token."""
    instance_pin: str | None = None
    """The instance the client asked for (the pin header's value), where pins are allowed."""
    timeout_seconds: float | None = None
    """The client's bound on the request's time from its admission (None: the server's
    REQUEST_TIMEOUT alone, which bounds it too)."""
    priority: int = 0
    """Its place in the engine's queue where the engine schedules by priority (vLLM's
    meaning: lower values first; 0 is the default)."""
    n: int = field(init=False)
    """Completions asked for (`sampling["n"]`, else 1)."""
    max_tokens: int | None = field(init=False)
    """New tokens at most per completion (`sampling["max_tokens"]`; None: the engine's)."""

    def __post_init__(self) -> None:
        self.n = integer(self.sampling.get("n")) or 1
        self.max_tokens = integer(self.sampling.get("max_tokens"))

    def route(self) -> RouteHint:
        """What the request is routed to a model's instance by: its prompt (as the client
        gave it, before any chat template, and whether one wraps it), its adapter and pin."""
        adapter = self.lora.name if self.lora is not None else None
        return RouteHint(
            text=self.prompt,
            adapter=adapter,
            pin=self.instance_pin,
            chat_template=self.chat_template,
        )


def integer(value: Any) -> int | None:
    """An integer value (bools and other types are the schema's to refuse)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(slots=True)
class CompletionDelta:
    """What one of the `n` completions produced since the previous chunk."""

    index: int
    text: str
    num_tokens: int
    cumulative_logprob: float | None = None
    logprobs: list[TokenLogprobs] | None = None
    finish_reason: str | None = None


@dataclass(slots=True)
class GenerationChunk:
    """One step of a request's output: the completions that changed in it."""

    completions: list[CompletionDelta]
    num_prompt_tokens: int
    finished: bool
    timeline: EngineTimeline | None = None
    """The engine's timeline of the request (on its final chunk, where the engine keeps one)."""


class InferenceEngine(Protocol):
    """What the server needs from an engine; the vLLM adapter and test doubles implement it.

    Nothing here assumes the engine runs in this process.
    """

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    def generate(self, request: ValidRequest) -> AsyncGenerator[GenerationChunk, None]:
        """Yield delta chunks (`request.stream`) or a single final chunk until the request
        finishes. Raises `InvalidRequestError` (naming the field) for parameters the engine
        rejects, before the first chunk and before calling `request.on_accepted` (an engine
        that cannot tell may never call it). Closing the iterator early aborts the request."""
        ...

    async def abort(self, request_id: str) -> None:
        """End a running request; its `generate` iterator finishes with reason "abort"."""
        ...

    async def check_health(self) -> None:
        """Raise `EngineUnhealthyError` when the engine is known to have failed (cheap)."""
        ...

    async def ping(self, timeout: float) -> None:
        """A round trip to the engine: raise `EngineUnhealthyError` when it does not answer
        within `timeout` seconds (a hung engine) or has failed."""
        ...

    @property
    def num_unfinished_requests(self) -> int:
        """Requests the engine still holds (running or queued)."""
        ...

    @property
    def progress(self) -> int:
        """A count that moves whenever the engine gets somewhere (one per step that reported):
        supervision tells a busy engine from a hung one by it."""
        ...

    @property
    def request_capacity(self) -> int | None:
        """How many requests the model admits at once by default, from the engine's capacity
        (None: no limit)."""
        ...

    @property
    def max_model_len(self) -> int:
        """The model's context length in tokens (prompt plus output)."""
        ...

    @property
    def max_logprobs(self) -> int:
        """The model's bound on log-probabilities per position (-1: none)."""
        ...

    @property
    def is_healthy(self) -> bool: ...

    @property
    def supports_images(self) -> bool: ...

    def render_chat_prompt(self, text: str) -> str:
        """Wrap `text` as one user turn with the model's chat template."""
        ...

    def prefix_tokens(self, text: str, limit: int) -> Sequence[int]:
        """The first `limit` tokens of `text` by the model's tokenizer (for prefix-aware
        routing; cheap: only the text's leading part is tokenized)."""
        ...


class ServingModel(Protocol):
    """A model version as the core sees it: a name, its engines, and admission of requests,
    each routed to one of the engines."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def engine(self) -> InferenceEngine:
        """One of its engines: for what every one has alike (the context length)."""
        ...

    def admit(
        self, request_id: str, route: RouteHint | None = None
    ) -> AbstractAsyncContextManager[InferenceEngine]:
        """Hold a place for one request while it runs, on the engine it is routed to (by
        `route`), or raise why it cannot run now (`ModelUnavailableError`,
        `OverloadedError`, `EngineUnhealthyError`, `InvalidRequestError` for a bad pin)."""
        ...


class GenerationObserver(Protocol):
    """Told of each chunk a request produces (access logs, statistics): O(1) per call."""

    def record_chunk(self, num_prompt_tokens: int, num_new_tokens: int) -> None: ...
