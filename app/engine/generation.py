"""Runs generate requests against a served model and yields the backend's responses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from app.access_log import RequestLog, current_request
from app.engine.registry import ServedModel
from app.engine.responses import ResponseBuilder
from app.engine.translate import GenerationPlan, plan_generation
from app.engine.types import GenerationChunk
from app.schemas.generate import GenerateRequest


def prepare(body: GenerateRequest, model: ServedModel, stream_default: bool) -> GenerationPlan:
    """Check the model can serve, then validate and translate the request."""
    model.ensure_ready()
    plan = plan_generation(body, model, stream_default=stream_default)
    log = current_request.get()
    if log is not None:
        log.model, log.version, log.prompt = model.name, model.version, body.text_input
    return plan


async def generate_response(model: ServedModel, plan: GenerationPlan) -> dict[str, Any]:
    """The single response of a non-streaming request."""
    builder = ResponseBuilder(plan, model.name, model.version)
    async with model.request_slot():
        chunks = [chunk async for chunk in logged(model.engine.generate(plan.engine_request))]
    return builder.build_final(chunks)


async def stream_deltas(model: ServedModel, plan: GenerationPlan) -> AsyncIterator[dict[str, Any]]:
    """One response per engine step, each with only the text new since the previous one."""
    if not plan.stream:
        yield await generate_response(model, plan)
        return
    builder = ResponseBuilder(plan, model.name, model.version)
    async with model.request_slot():
        chunks = logged(model.engine.generate(plan.engine_request))
        try:
            async for chunk in chunks:
                yield builder.build(chunk)
        finally:
            await chunks.aclose()


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
