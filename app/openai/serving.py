"""What the OpenAI frontend needs from a model's engine: its OpenAI API, an optional
capability (the vLLM adapter serves it with vLLM's own serving classes)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from app.core.guard import RequestGuard
from app.repository.served_model import ServedModel

CAPABILITY = "openai_serving"
"""The engine attribute holding its `OpenAIServing` (None while the engine is not started)."""


class OpenAIServing(Protocol):
    """Reads an OpenAI request body and answers it: the response's JSON, or its SSE frames
    (`data: {...}`, ending with `data: [DONE]`) when the body asks to stream. Every engine
    request it starts runs through `guard.stream`; invalid bodies raise `InvalidRequestError`
    (with `param`), other failures the server's other exceptions."""

    async def create_completion(
        self, body: dict[str, Any], *, guard: RequestGuard, adapter: str | None, headers: Mapping[str, str]
    ) -> dict[str, Any] | AsyncIterator[str]: ...

    async def create_chat_completion(
        self, body: dict[str, Any], *, guard: RequestGuard, adapter: str | None, headers: Mapping[str, str]
    ) -> dict[str, Any] | AsyncIterator[str]: ...


def serves_openai(model: ServedModel) -> bool:
    """Whether the model's engine has an OpenAI API at all."""
    return hasattr(model.engine, CAPABILITY)


def openai_serving(model: ServedModel) -> OpenAIServing | None:
    return getattr(model.engine, CAPABILITY, None)
