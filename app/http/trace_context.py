"""The W3C trace context (`traceparent`, `tracestate`) of each HTTP request, handed to the core
for the request's spans (Triton's OpenTelemetry context propagation)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from app.core.timing import TRACE_CONTEXT

TRACE_HEADERS = {b"traceparent": "traceparent", b"tracestate": "tracestate"}
MAX_HEADER_BYTES = 512
"""Longer values are not trace context (traceparent is 55 characters); they are ignored."""


def trace_headers(headers: list[tuple[bytes, bytes]]) -> dict[str, str] | None:
    """The request's trace context headers, or None when it has no `traceparent`."""
    found = {}
    for name, value in headers:
        key = TRACE_HEADERS.get(name.lower())
        if key is not None and len(value) <= MAX_HEADER_BYTES:
            found[key] = value.decode("latin-1")
    return found if "traceparent" in found else None


class TraceContextMiddleware:
    """Sets the core's trace context for the request (a pure ASGI middleware: the route runs
    in the same context, streams included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = TRACE_CONTEXT.set(trace_headers(scope["headers"]))
        try:
            await self.app(scope, receive, send)
        finally:
            TRACE_CONTEXT.reset(token)
