"""vLLM's request outputs as the core's engine-neutral chunks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.core.types import CompletionDelta, GenerationChunk, TokenLogprobs
from app.engine.timeline import engine_timeline


def to_chunk(output: Any) -> GenerationChunk:
    """A vLLM `RequestOutput` (DELTA or FINAL_ONLY) as an engine-neutral chunk."""
    return GenerationChunk(
        completions=[
            CompletionDelta(
                index=completion.index,
                text=completion.text,
                num_tokens=len(completion.token_ids),
                cumulative_logprob=completion.cumulative_logprob,
                logprobs=None
                if completion.logprobs is None
                else plain_logprobs(completion.logprobs),
                finish_reason=completion.finish_reason,
            )
            for completion in output.outputs
        ],
        num_prompt_tokens=len(output.prompt_token_ids or ()),
        finished=output.finished,
        timeline=engine_timeline(output),
    )


def plain_logprobs(positions: Iterable[dict[int, Any]]) -> list[TokenLogprobs]:
    """vLLM's per-position `Logprob` objects as plain dicts, the backend's structure."""
    return [
        {
            token_id: {
                "logprob": entry.logprob,
                "rank": entry.rank,
                "decoded_token": entry.decoded_token,
            }
            for token_id, entry in position.items()
        }
        for position in positions
    ]
