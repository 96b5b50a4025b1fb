"""Engine-neutral data passed between the engine wrapper and the rest of the server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

TokenLogprobs = dict[int, dict[str, Any]]
"""One generated position: token id -> {"logprob", "rank", "decoded_token"}."""


@dataclass(frozen=True, slots=True)
class LoraAdapter:
    """A LoRA adapter of a model: its name, vLLM's integer id and its folder."""

    name: str
    int_id: int
    path: Path


@dataclass(slots=True)
class GenerationRequest:
    """One request as the engine sees it; `sampling_params` is a vLLM `SamplingParams`."""

    request_id: str
    prompt: str
    sampling_params: Any
    images: list[Any] = field(default_factory=list)
    lora: LoraAdapter | None = None


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


class InferenceEngine(Protocol):
    """What the server needs from an engine; `VllmEngine` and test doubles implement it."""

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Yield delta chunks (or a single final chunk) until the request finishes.

        Closing the iterator early aborts the request in the engine.
        """
        ...

    async def abort(self, request_id: str) -> None:
        """End a running request; its `generate` iterator finishes with reason "abort"."""
        ...

    async def check_health(self) -> None:
        """Raise `ModelUnavailableError` when the engine cannot serve."""
        ...

    @property
    def num_unfinished_requests(self) -> int:
        """Requests the engine still holds (running or queued)."""
        ...

    @property
    def max_model_len(self) -> int:
        """The model's context length in tokens (prompt plus output)."""
        ...

    @property
    def is_healthy(self) -> bool: ...

    @property
    def supports_images(self) -> bool: ...

    def render_chat_prompt(self, text: str) -> str:
        """Wrap `text` as one user turn with the model's chat template."""
        ...
