"""An OpenAI API double for the frontend's unit tests: it reads a few fields of the body,
runs the engine double through the request's guard, and answers in OpenAI's shapes."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core.chunks import merge_chunks
from app.core.guard import OutputReading, RequestGuard, chunk_timeline, chunk_token_counts
from app.core.types import GenerationChunk, ValidRequest
from app.engine.sampling import to_sampling_params
from app.errors import InvalidRequestError, ModelNotFoundError, ServerError
from app.schemas.openai import OpenAIEndpoint


class Body(BaseModel):
    """The fields the double reads; others are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: int = Field(16, ge=1, le=2048)
    n: int = Field(1, ge=1, le=64)
    stream: bool = False
    stop: str | list[str] | None = None
    stream_options: dict[str, Any] | None = None


class CompletionBody(Body):
    prompt: str


class Message(BaseModel):
    role: str
    content: str


class ChatBody(Body):
    messages: list[Message] = Field(min_length=1)


class ResponsesBody(BaseModel):
    """The Responses API fields the double reads."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    input: str | list[Message]
    max_output_tokens: int | None = Field(None, ge=1)
    stream: bool = False


class FakeOpenAIServing:
    """`OpenAIServing` over an engine double; records the calls it received."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.calls: list[dict[str, Any]] = []
        self.utility = FakeOpenAIUtility()

    async def create(
        self,
        endpoint: OpenAIEndpoint,
        body: dict[str, Any],
        *,
        guard: RequestGuard,
        adapter: str | None,
        headers: Mapping[str, str],
    ) -> bytes | AsyncGenerator[str, None]:
        if endpoint is OpenAIEndpoint.RESPONSES:
            result = await self.create_response(body, guard=guard, adapter=adapter)
        elif endpoint is OpenAIEndpoint.COMPLETIONS:
            completion = read(CompletionBody, body)
            result = await self._serve(
                completion, completion.prompt, "text_completion", guard, adapter, headers
            )
        else:
            chat = read(ChatBody, body)
            prompt = " ".join(message.content for message in chat.messages)
            result = await self._serve(chat, prompt, "chat.completion", guard, adapter, headers)
        return json.dumps(result).encode() if isinstance(result, dict) else result

    async def create_response(
        self, body: dict[str, Any], *, guard: RequestGuard, adapter: str | None
    ) -> dict[str, Any] | AsyncGenerator[str, None]:
        request = read(ResponsesBody, body)
        self.calls.append({"body": request, "adapter": adapter, "request_id": guard.request_id})
        guard.check_limits(None, request.max_output_tokens, "max_output_tokens")
        given = request.input
        prompt = given if isinstance(given, str) else " ".join(m.content for m in given)
        sampling = {"max_tokens": request.max_output_tokens or 16}
        generation = ValidRequest(guard.request_id, prompt, sampling, stream=request.stream)
        chunks = guard.stream(self.engine.generate(generation), CHUNK_OUTPUTS)
        name = adapter or request.model or "fake"
        if request.stream:
            return response_events(chunks, name)
        merged = merge_chunks([chunk async for chunk in chunks], 1)
        return response_object(merged.completions[0].text, name, merged.num_prompt_tokens)

    async def _serve(
        self,
        request: Body,
        prompt: str,
        kind: str,
        guard: RequestGuard,
        adapter: str | None,
        headers: Mapping[str, str],
    ) -> dict[str, Any] | AsyncGenerator[str, None]:
        self.calls.append(
            {
                "body": request,
                "adapter": adapter,
                "request_id": guard.request_id,
                "headers": dict(headers),
            }
        )
        guard.check_limits(
            request.n, request.max_tokens if "max_tokens" in request.model_fields_set else None
        )
        sampling = {"max_tokens": request.max_tokens, "n": request.n, "stop": request.stop}
        to_sampling_params(sampling, request.stream)  # refused before a stream, as vLLM does
        generation = ValidRequest(guard.request_id, prompt, sampling, stream=request.stream)
        chunks = guard.stream(self.engine.generate(generation), CHUNK_OUTPUTS)
        name = adapter or request.model or "fake"
        if request.stream:
            return frames(
                chunks, kind, name, bool((request.stream_options or {}).get("include_usage"))
            )
        merged = merge_chunks([chunk async for chunk in chunks], request.n)
        return response(merged, kind, name)


def read(model: type[BaseModel], body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = ".".join(str(part) for part in error["loc"])
        raise InvalidRequestError(f"{param}: {error['msg']}", param=param) from exc


CHUNK_OUTPUTS = OutputReading(chunk_token_counts, chunk_timeline)
"""The engine double's chunks, read as the guarded vLLM client reads vLLM's outputs."""


def choice(
    kind: str, index: int, text: str, finish_reason: str | None, delta: bool
) -> dict[str, Any]:
    if kind == "text_completion":
        return {"index": index, "text": text, "finish_reason": finish_reason}
    key = "delta" if delta else "message"
    return {
        "index": index,
        key: {"role": "assistant", "content": text},
        "finish_reason": finish_reason,
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response(chunk: GenerationChunk, kind: str, name: str) -> dict[str, Any]:
    choices = [
        choice(kind, c.index, c.text, c.finish_reason, delta=False) for c in chunk.completions
    ]
    generated = sum(c.num_tokens for c in chunk.completions)
    return {
        "id": "fake-1",
        "object": kind,
        "created": 0,
        "model": name,
        "choices": choices,
        "usage": usage(chunk.num_prompt_tokens, generated),
    }


async def frames(
    chunks: AsyncIterator[GenerationChunk], kind: str, name: str, include_usage: bool
) -> AsyncGenerator[str, None]:
    """vLLM's framing: a chunk per step; a stream the core ended stops without an error
    (the frontend reports it); the usage chunk; `[DONE]`."""
    prompt_tokens = generated = 0
    try:
        async for chunk in chunks:
            prompt_tokens = chunk.num_prompt_tokens or prompt_tokens
            generated += sum(c.num_tokens for c in chunk.completions)
            choices = [
                choice(kind, c.index, c.text, c.finish_reason, delta=True)
                for c in chunk.completions
            ]
            event = {"id": "fake-1", "object": kind + ".chunk", "model": name, "choices": choices}
            yield f"data: {json.dumps(event)}\n\n"
    except ServerError:
        pass
    if include_usage:
        last = {"id": "fake-1", "choices": [], "usage": usage(prompt_tokens, generated)}
        yield f"data: {json.dumps(last)}\n\n"
    yield "data: [DONE]\n\n"


class FakeOpenAIUtility:
    """`OpenAIUtility` double: one token per character (its code point), adapters by name."""

    def __init__(self) -> None:
        self.lora_enabled = True
        self.adapters: dict[str, str] = {}
        self.calls: list[tuple[str, dict[str, Any], str | None]] = []

    @property
    def runtime_adapters(self) -> list[str]:
        return sorted(self.adapters)

    async def tokenize(self, body: dict[str, Any], adapter: str | None) -> dict[str, Any]:
        self.calls.append(("tokenize", body, adapter))
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise InvalidRequestError("prompt: Field required", param="prompt")
        tokens = [ord(char) for char in prompt]
        strs = list(prompt) if body.get("return_token_strs") else None
        return {"count": len(tokens), "max_model_len": 2048, "tokens": tokens, "token_strs": strs}

    async def detokenize(self, body: dict[str, Any], adapter: str | None) -> dict[str, Any]:
        self.calls.append(("detokenize", body, adapter))
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(token, int) for token in tokens):
            raise InvalidRequestError(
                "tokens: Input should be a valid list of integers", param="tokens"
            )
        return {"prompt": "".join(chr(token) for token in tokens)}

    async def load_lora_adapter(self, body: dict[str, Any]) -> str:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            raise InvalidRequestError("Both 'lora_name' and 'lora_path' must be provided.")
        self.adapters[name] = path
        return f"Success: LoRA adapter '{name}' added successfully."

    async def unload_lora_adapter(self, body: dict[str, Any]) -> str:
        name = body.get("lora_name")
        if name not in self.adapters:
            raise ModelNotFoundError(
                f"The lora adapter '{name}' cannot be found.", param="lora_name"
            )
        del self.adapters[name]
        return f"Success: LoRA adapter '{name}' removed successfully."


def response_object(
    text: str, name: str, input_tokens: int, output_tokens: int = 0
) -> dict[str, Any]:
    """A Responses API response with one message of `text`."""
    message = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return {
        "id": "resp_fake",
        "object": "response",
        "model": name,
        "status": "completed",
        "output": [message],
        "usage": usage,
    }


async def response_events(
    chunks: AsyncIterator[GenerationChunk], name: str
) -> AsyncGenerator[str, None]:
    """vLLM's Responses events, each `event: <type>` (no `[DONE]`): created, a text delta per
    step, completed (also when the core ended the stream: the frontend reports that)."""
    sequence = itertools.count()
    created = {"type": "response.created", "response": response_object("", name, 0)}
    yield event_frame(created, next(sequence))
    text, prompt_tokens = "", 0
    try:
        async for chunk in chunks:
            prompt_tokens = chunk.num_prompt_tokens or prompt_tokens
            delta = "".join(c.text for c in chunk.completions)
            text += delta
            yield event_frame(
                {"type": "response.output_text.delta", "delta": delta}, next(sequence)
            )
    except ServerError:
        pass
    completed = {
        "type": "response.completed",
        "response": response_object(text, name, prompt_tokens),
    }
    yield event_frame(completed, next(sequence))


def event_frame(event: dict[str, Any], sequence_number: int) -> str:
    data = json.dumps({**event, "sequence_number": sequence_number})
    return f"event: {event['type']}\ndata: {data}\n\n"
