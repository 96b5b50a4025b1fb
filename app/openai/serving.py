"""What the OpenAI frontend needs from a model's engine: its OpenAI API, an optional
capability (the vLLM adapter serves it with vLLM's own serving classes)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any, Protocol

from app.core.guard import RequestGuard
from app.repository.served_model import ServedModel
from app.schemas.openai import OpenAIEndpoint

CAPABILITY = "openai_serving"
"""The engine attribute holding its `OpenAIServing` (None while the engine is not started)."""


class OpenAIUtility(Protocol):
    """vLLM's utility API of a model version: tokenization and runtime LoRA adapters. Bodies
    are vLLM's; invalid ones raise `InvalidRequestError` (with `param`)."""

    @property
    def lora_enabled(self) -> bool:
        """The engine was started with LoRA (adapters can be loaded at run time)."""
        ...

    @property
    def runtime_adapters(self) -> list[str]:
        """The adapters loaded at run time."""
        ...

    async def tokenize(self, body: dict[str, Any], adapter: str | None) -> dict[str, Any]: ...

    async def detokenize(self, body: dict[str, Any], adapter: str | None) -> dict[str, Any]: ...

    async def load_lora_adapter(self, body: dict[str, Any]) -> str: ...

    async def unload_lora_adapter(self, body: dict[str, Any]) -> str: ...


class OpenAIServing(Protocol):
    """A model's OpenAI API: it reads the body of one of OpenAI's generating routes and answers
    it, running every engine request it starts through `guard.stream`. Invalid bodies raise
    `InvalidRequestError` (with `param`), other failures the server's other exceptions."""

    async def create(
        self,
        endpoint: OpenAIEndpoint,
        body: dict[str, Any],
        *,
        guard: RequestGuard,
        adapter: str | None,
        headers: Mapping[str, str],
    ) -> bytes | AsyncGenerator[str, None]:
        """The response's JSON text, or its SSE frames when the body asks to stream: `data: {...}`
        ending with `data: [DONE]`; the Responses API's `event: <type>` and `data: {...}`,
        with no `[DONE]`."""
        ...

    @property
    def utility(self) -> OpenAIUtility: ...


def serves_openai(model: ServedModel) -> bool:
    """Whether the model's engine has an OpenAI API at all."""
    return hasattr(model.engine, CAPABILITY)


def openai_serving(model: ServedModel) -> OpenAIServing | None:
    """The OpenAI API of one of the model's engines (what they all have alike: models,
    adapters); a request is served by the engine it was routed to (`engine_openai_serving`)."""
    return engine_openai_serving(model.engine)


def openai_servings(model: ServedModel) -> list[OpenAIServing]:
    """The OpenAI API of each of the model's engines that has one (started)."""
    servings = (engine_openai_serving(engine) for engine in model.engines)
    return [serving for serving in servings if serving is not None]


def engine_openai_serving(engine: object) -> OpenAIServing | None:
    return getattr(engine, CAPABILITY, None)
