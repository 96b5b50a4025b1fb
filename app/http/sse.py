"""The Server-Sent Events response of every stream (Triton's `generate_stream`, the browser
`EventSource` stream and the OpenAI streams): sse-starlette's, sending frames built by the
frontends unchanged."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

__all__ = ["EventStream"]


class EventStream(EventSourceResponse):
    """sse-starlette's response (keep-alive pings, disconnects, shutdown) of ready-made SSE
    frames, whose iterator is closed however the response ends: a client gone mid-stream (or
    a HEAD request, which never starts it) ends the generation behind it at once.

    `ping_seconds`: the interval of keep-alive comments; 0 sends none. Every send of a frame
    goes through sse-starlette's per-send timeout (none here), whose cancel scope costs a few
    microseconds a frame: sse-starlette offers no public way around it.
    """

    def __init__(self, frames: AsyncGenerator[bytes, None], ping_seconds: float = 0) -> None:
        super().__init__(frames, sep="\n", ping=ping_seconds)
        self.frames = frames

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.frames.aclose()
