"""One streaming request over each of the server's protocols (Triton SSE, Triton gRPC, OpenAI),
recorded the same way: refused before any output, or how many tokens came, how it finished
and whether an error came after the stream started. The burst and the soak send these."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio

if TYPE_CHECKING:  # typing.Self is Python 3.11's
    from typing_extensions import Self

PROTOCOLS = ("sse", "grpc", "openai")
REFUSED_STATUSES = (429, 503)


@dataclass(slots=True)
class Outcome:
    """What one request got."""

    protocol: str
    start: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    end: float = 0.0
    refused: bool = False
    """Turned away before any output (503 / 429, the overload error on a gRPC stream): the
    client may retry."""
    tokens: int = 0
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None
    """An error once the request was accepted (after a 200), or before that for a reason
    other than load."""
    disconnected: bool = False
    """The client went away after its first tokens (on purpose)."""

    @property
    def completed(self) -> bool:
        return not self.refused and self.error is None and self.finish_reason is not None

    @property
    def failed(self) -> bool:
        return not (self.completed or self.refused or self.disconnected)

    def leaves(self, disconnect_after: int | None) -> bool:
        """Whether the client goes away now (it has `disconnect_after` tokens)."""
        self.disconnected = disconnect_after is not None and self.tokens >= disconnect_after
        return self.disconnected

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def took(self, tokens: int, text: str) -> None:
        if tokens and self.first_token is None:
            self.first_token = time.perf_counter()
        self.tokens += tokens
        self.text += text


@dataclass(frozen=True)
class Servers:
    """Where one server answers: its HTTP base URL and gRPC host:port, and its model."""

    http_url: str
    grpc_url: str
    model: str = "smollm2"


@dataclass(frozen=True)
class Ask:
    """What one request asks for: `max_tokens` new tokens (ignoring EOS) after `prompt`."""

    prompt: str
    max_tokens: int
    temperature: float | None = None
    lora: str | None = None
    """A LoRA adapter of the model (Triton's `lora_name`, OpenAI's model name)."""
    disconnect_after: int | None = None
    """The client goes away after this many tokens."""
    seed: int | None = None

    def sampling(self) -> dict[str, Any]:
        values: dict[str, Any] = {"max_tokens": self.max_tokens, "ignore_eos": True}
        if self.temperature is not None:
            values["temperature"] = self.temperature
        if self.seed is not None:
            values["seed"] = self.seed
        if self.lora is not None:
            values["lora_name"] = self.lora
        return values


async def triton_sse(
    http: httpx.AsyncClient, servers: Servers, ask: Ask, outcome: Outcome
) -> Outcome:
    body = {
        "text_input": ask.prompt,
        "parameters": ask.sampling(),
        "return_num_output_tokens": True,
        "return_finish_reason": True,
    }
    try:
        async with http.stream(
            "POST", f"{servers.http_url}/v2/models/{servers.model}/generate_stream", json=body
        ) as response:
            if response.status_code != 200:
                await response.aread()
                return ended(outcome, response.status_code, response.text)
            async for frame in data_frames(sse_lines(response)):
                if "error" in frame:
                    outcome.error = str(frame["error"])
                    break
                outcome.took(int(frame.get("num_output_tokens") or 0), frame.get("text_output", ""))
                outcome.finish_reason = frame.get("finish_reason") or outcome.finish_reason
                if outcome.leaves(ask.disconnect_after):
                    break
    except httpx.HTTPError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    outcome.end = time.perf_counter()
    return outcome


async def openai_completion(
    http: httpx.AsyncClient, servers: Servers, ask: Ask, outcome: Outcome
) -> Outcome:
    sampling = ask.sampling()
    body: dict[str, Any] = {
        "model": sampling.pop("lora_name", servers.model),
        "prompt": ask.prompt,
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampling,
    }
    usage_tokens = None
    try:
        async with http.stream("POST", f"{servers.http_url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                return ended(outcome, response.status_code, response.text)
            async for frame in data_frames(sse_lines(response)):
                if "error" in frame:
                    outcome.error = json.dumps(frame["error"])
                    break
                for choice in frame.get("choices", ()):
                    outcome.took(1 if choice.get("text") else 0, choice.get("text", ""))
                    outcome.finish_reason = choice.get("finish_reason") or outcome.finish_reason
                if frame.get("usage"):
                    usage_tokens = frame["usage"]["completion_tokens"]
                if outcome.leaves(ask.disconnect_after):
                    break
    except httpx.HTTPError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    if usage_tokens is not None:
        outcome.tokens = usage_tokens
    outcome.end = time.perf_counter()
    return outcome


async def triton_grpc_stream(
    client: triton_grpc_aio.InferenceServerClient, servers: Servers, ask: Ask, outcome: Outcome
) -> Outcome:
    request = grpc_request(servers.model, ask.prompt, ask.sampling())

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield request

    responses = client.stream_infer(inputs_iterator=requests())
    try:
        async for result, error in responses:
            if error is not None:
                refused = outcome.tokens == 0 and "is overloaded" in error.message()
                outcome.refused = refused
                outcome.error = None if refused else str(error)
                break
            texts, counts = result.as_numpy("text_output"), result.as_numpy("num_output_tokens")
            if texts is not None and counts is not None:
                outcome.took(int(counts[0]), texts[0].decode("utf-8"))
            reasons = result.as_numpy("finish_reason")
            if reasons is not None and reasons[0] not in (b"", b"None", None):
                outcome.finish_reason = reasons[0].decode()
            if outcome.leaves(ask.disconnect_after):
                break
    except triton_grpc.InferenceServerException as exc:
        outcome.error = str(exc)
    finally:
        responses.cancel()
    outcome.end = time.perf_counter()
    return outcome


def grpc_request(model: str, prompt: str, values: dict[str, Any]) -> dict[str, Any]:
    """A streaming ModelStreamInfer request as the vLLM backend's clients build it."""
    inputs = [
        bytes_tensor("text_input", prompt),
        bool_tensor("stream", True),
        bytes_tensor("sampling_parameters", json.dumps(values)),
        bool_tensor("exclude_input_in_output", True),
        bool_tensor("return_num_output_tokens", True),
        bool_tensor("return_finish_reason", True),
    ]
    outputs = [
        triton_grpc.InferRequestedOutput(name)
        for name in ("text_output", "num_output_tokens", "finish_reason")
    ]
    return {"model_name": model, "inputs": inputs, "outputs": outputs}


def bytes_tensor(name: str, value: str) -> triton_grpc.InferInput:
    tensor = triton_grpc.InferInput(name, [1], "BYTES")
    tensor.set_data_from_numpy(np.array([value.encode()], dtype=np.object_))
    return tensor


def bool_tensor(name: str, value: bool) -> triton_grpc.InferInput:
    tensor = triton_grpc.InferInput(name, [1], "BOOL")
    tensor.set_data_from_numpy(np.array([value], dtype=bool))
    return tensor


def ended(outcome: Outcome, status: int, body: str) -> Outcome:
    """A request answered with an error status before its stream started."""
    outcome.refused = status in REFUSED_STATUSES
    if not outcome.refused:
        outcome.error = f"HTTP {status}: {body[:200]}"
    outcome.end = time.perf_counter()
    return outcome


async def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """A server-sent event stream's lines, split where SSE splits them (CR, LF, CRLF) only:
    httpx's `aiter_lines` also splits at the Unicode line breaks (U+2028, U+0085...) that a
    sampled token may put raw inside an event's JSON."""
    pending = ""
    async for text in response.aiter_text():
        pending += text
        *lines, pending = pending.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        for line in lines:
            yield line
    if pending:
        yield pending


async def data_frames(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """The JSON of each SSE `data:` frame (`[DONE]` ends it)."""
    async for line in lines:
        if not line.startswith("data: "):
            continue
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            return
        yield json.loads(data)


class Traffic:
    """Clients of one server over the three protocols; `send` one request over a protocol.
    `live` holds every request's outcome from its start, filled in as its stream goes."""

    def __init__(self, servers: Servers, timeout: float = 600.0) -> None:
        self.servers = servers
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        self._http = httpx.AsyncClient(timeout=timeout, limits=limits)
        self._grpc = triton_grpc_aio.InferenceServerClient(url=servers.grpc_url)
        self.live: list[Outcome] = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()
        await self._grpc.close()

    async def send(self, protocol: str, ask: Ask) -> Outcome:
        """One streaming request over `protocol` ("sse", "grpc" or "openai")."""
        outcome = Outcome(protocol)
        self.live.append(outcome)
        if protocol == "sse":
            return await triton_sse(self._http, self.servers, ask, outcome)
        if protocol == "openai":
            return await openai_completion(self._http, self.servers, ask, outcome)
        return await triton_grpc_stream(self._grpc, self.servers, ask, outcome)
