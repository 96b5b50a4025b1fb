"""An engine double that yields one token per chunk as fast as it can, for the micro-benchmark."""

from __future__ import annotations

import zlib
from collections.abc import AsyncGenerator

from app.core.types import CompletionDelta, GenerationChunk, ValidRequest
from app.engine.sampling import to_sampling_params

TOKEN_TEXT = " tok"


class FastEngine:
    """`InferenceEngine` whose requests produce `max_tokens` one-token chunks without waiting
    (after converting their sampling values to vLLM's `SamplingParams`, as the real one does)."""

    async def start(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    @property
    def is_healthy(self) -> bool:
        return True

    @property
    def supports_images(self) -> bool:
        return False

    @property
    def max_model_len(self) -> int:
        return 1 << 20

    @property
    def max_logprobs(self) -> int:
        return 20

    @property
    def num_unfinished_requests(self) -> int:
        return 0

    @property
    def progress(self) -> int:
        return 0

    @property
    def request_capacity(self) -> int | None:
        return None

    async def abort(self, request_id: str) -> None:
        return None

    def render_chat_prompt(self, text: str) -> str:
        return text

    def prefix_tokens(self, text: str, limit: int) -> list[int]:
        """One token per word (each word's CRC-32)."""
        return [zlib.crc32(word.encode()) for word in text.split()[:limit]]

    async def check_health(self) -> None:
        return None

    async def ping(self, timeout: float) -> None:
        return None

    async def generate(self, request: ValidRequest) -> AsyncGenerator[GenerationChunk, None]:
        params = to_sampling_params(request.sampling, request.stream)  # as the vLLM engine does
        total = params.max_tokens or 16
        prompt_tokens = len(request.prompt.split())
        if request.on_accepted is not None:
            request.on_accepted()
        if not request.stream:
            yield chunk(TOKEN_TEXT * total, total, prompt_tokens, last=True)
            return
        for step in range(total):
            yield chunk(TOKEN_TEXT, 1, prompt_tokens, last=step == total - 1)


def chunk(text: str, tokens: int, prompt_tokens: int, last: bool) -> GenerationChunk:
    completion = CompletionDelta(
        index=0, text=text, num_tokens=tokens, finish_reason="length" if last else None
    )
    return GenerationChunk(completions=[completion], num_prompt_tokens=prompt_tokens, finished=last)
