"""Runs generate requests against a served model and yields the backend's responses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from app.access_log import RequestLog, current_request
from app.engine.registry import ServedModel
from app.engine.responses import ResponseBuilder
from app.engine.translate import GenerationPlan, RequestLimits, plan_generation
from app.engine.types import GenerationChunk
from app.errors import RequestTimeoutError
from app.schemas.generate import GenerateRequest


def prepare(
    body: GenerateRequest, model: ServedModel, stream_default: bool, limits: RequestLimits
) -> GenerationPlan:
    """Check the model can serve, then validate and translate the request."""
    model.ensure_ready()
    plan = plan_generation(body, model, stream_default=stream_default, limits=limits)
    log = current_request.get()
    if log is not None:
        log.model, log.version, log.prompt = model.name, model.version, body.text_input
    return plan


async def generate_response(model: ServedModel, plan: GenerationPlan) -> dict[str, Any]:
    """The single response of a non-streaming request."""
    builder = ResponseBuilder(plan, model.name, model.version)
    async with model.request_slot(plan.engine_request.request_id):
        chunks = [chunk async for chunk in engine_chunks(model, plan)]
    return builder.build_final(chunks)


async def stream_deltas(model: ServedModel, plan: GenerationPlan) -> AsyncIterator[dict[str, Any]]:
    """One response per engine step, each with only the text new since the previous one."""
    if not plan.stream:
        yield await generate_response(model, plan)
        return
    builder = ResponseBuilder(plan, model.name, model.version)
    async with model.request_slot(plan.engine_request.request_id):
        chunks = engine_chunks(model, plan)
        try:
            async for chunk in chunks:
                yield builder.build(chunk)
        finally:
            await chunks.aclose()


def engine_chunks(model: ServedModel, plan: GenerationPlan) -> AsyncIterator[GenerationChunk]:
    """The engine's chunks for this request, counted for the access log, within its time limit."""
    chunks = logged(model.engine.generate(plan.engine_request))
    if plan.timeout_seconds is None:
        return chunks
    return with_deadline(chunks, plan.timeout_seconds)


async def with_deadline(chunks: AsyncIterator[GenerationChunk], seconds: float) -> AsyncIterator[GenerationChunk]:
    """Abort (by closing the engine iterator) when the request runs past `seconds`."""
    deadline = time.monotonic() + seconds
    try:
        while True:
            remaining = deadline - time.monotonic()
            try:
                chunk = await asyncio.wait_for(anext(chunks), max(remaining, 0))
            except StopAsyncIteration:
                return
            except asyncio.TimeoutError:
                raise RequestTimeoutError(f"Request timed out after {seconds:g} s and was aborted") from None
            yield chunk
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]


async def logged(chunks: AsyncIterator[GenerationChunk]) -> AsyncIterator[GenerationChunk]:
    """Pass chunks through, counting tokens and the first token's time for the access log."""
    log: RequestLog | None = current_request.get()
    try:
        async for chunk in chunks:
            if log is not None:
                log.record_chunk(chunk.num_prompt_tokens, sum(c.num_tokens for c in chunk.completions))
            yield chunk
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
