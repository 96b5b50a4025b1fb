"""Folding a request's delta chunks into one."""

from __future__ import annotations

from collections.abc import Iterable

from app.core.types import CompletionDelta, GenerationChunk


def merge_chunks(chunks: Iterable[GenerationChunk], n: int) -> GenerationChunk:
    """Fold a request's chunks into one, joining each completion's text once at the end."""
    texts: list[list[str]] = [[] for _ in range(n)]
    merged = [CompletionDelta(index=i, text="", num_tokens=0) for i in range(n)]
    num_prompt_tokens = 0
    finished = False
    for chunk in chunks:
        num_prompt_tokens = chunk.num_prompt_tokens or num_prompt_tokens
        finished = chunk.finished
        for delta in chunk.completions:
            target = merged[delta.index]
            texts[delta.index].append(delta.text)
            target.num_tokens += delta.num_tokens
            if delta.logprobs is not None:
                if target.logprobs is None:
                    target.logprobs = []
                target.logprobs.extend(delta.logprobs)
            if delta.cumulative_logprob is not None:
                target.cumulative_logprob = delta.cumulative_logprob
            if delta.finish_reason is not None:
                target.finish_reason = delta.finish_reason
    for target, parts in zip(merged, texts, strict=True):
        target.text = "".join(parts)
    return GenerationChunk(
        completions=merged, num_prompt_tokens=num_prompt_tokens, finished=finished
    )
