"""The W3C trace context (`traceparent`, `tracestate` metadata) of each gRPC call, handed to the
core for the spans of the call's requests (every request of a stream continues its trace)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
import grpc.aio

from app.core.timing import TRACE_CONTEXT

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]
"""What a server interceptor hands a call on to: the next interceptor, or the call's handler."""
TRACE_METADATA = ("traceparent", "tracestate")
MAX_VALUE_LENGTH = 512


def trace_metadata(metadata: Iterable[tuple[str, Any]] | None) -> dict[str, str] | None:
    """The call's trace context, or None when it has no `traceparent`."""
    found = {
        key: value
        for key, value in metadata or ()
        if key in TRACE_METADATA and isinstance(value, str) and len(value) <= MAX_VALUE_LENGTH
    }
    return found if "traceparent" in found else None


class TraceContextInterceptor(grpc.aio.ServerInterceptor):
    """Runs each streaming call's handler with the call's trace context set (in the handler's
    own task: the requests it starts inherit it)."""

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        context = trace_metadata(details.invocation_metadata)
        if handler is None or context is None or handler.stream_stream is None:
            return handler
        behavior = handler.stream_stream

        async def traced(requests: Any, call: grpc.aio.ServicerContext) -> Any:
            TRACE_CONTEXT.set(context)
            return await behavior(requests, call)

        return grpc.stream_stream_rpc_method_handler(
            traced, handler.request_deserializer, handler.response_serializer
        )
