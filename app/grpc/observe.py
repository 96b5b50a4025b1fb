"""Every gRPC call passes here: API keys from the `authorization` metadata, no new inference
calls while the server drains, request metrics by method and code, and the access log."""

from __future__ import annotations

import asyncio
import hmac
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from prometheus_client import CollectorRegistry, Counter, Histogram

from app.grpc.load_request import LOAD_METHOD, bounded_load_handler
from app.grpc.status import SHUTTING_DOWN_MESSAGE
from app.grpc.trace_context import Continuation
from app.observability.access_log import RequestLog, write_access_log
from app.repository.registry import ModelRegistry
from app.security.restrictions import NO_RESTRICTIONS, ApiGroup, Restrictions

ACCESS_LOG_METHOD = "GRPC"
INFERENCE_SERVICE = "inference.GRPCInferenceService"
HEALTH_METHODS = frozenset(
    {
        f"/{INFERENCE_SERVICE}/ServerLive",
        f"/{INFERENCE_SERVICE}/ServerReady",
        "/grpc.health.v1.Health/Check",
    }
)
INFERENCE_METHODS = frozenset(
    {f"/{INFERENCE_SERVICE}/ModelInfer", f"/{INFERENCE_SERVICE}/ModelStreamInfer"}
)
UNAUTHORIZED_MESSAGE = "missing or invalid API key: send the metadata `authorization: Bearer <key>`"
REQUEST_ID_METADATA = "x-request-id"


class GrpcMetrics:
    """gRPC request metrics in the server's Prometheus registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("grpc_service", "grpc_method", "grpc_code")
        self.handled = Counter(
            "grpc_server_handled_total",
            "gRPC calls completed, by method and status code.",
            labels,
            registry=registry,
        )
        self.handling_seconds = Histogram(
            "grpc_server_handling_seconds",
            "Duration of gRPC calls until their status is sent (streams: until they close).",
            ("grpc_service", "grpc_method"),
            registry=registry,
        )
        self.stream_requests = Counter(
            "grpc_server_stream_requests_total",
            "Inference requests carried by ModelStreamInfer streams, "
            "by the status each ended with.",
            labels,
            registry=registry,
        )

    def call_ended(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        service, name = split_method(method)
        self.handled.labels(service, name, code.name).inc()
        self.handling_seconds.labels(service, name).observe(seconds)

    def stream_request_ended(self, method: str, code: grpc.StatusCode) -> None:
        service, name = split_method(method)
        self.stream_requests.labels(service, name, code.name).inc()


def split_method(method: str) -> tuple[str, str]:
    """`/inference.GRPCInferenceService/ModelReady` -> (service, method)."""
    service, _, name = method.lstrip("/").partition("/")
    return service, name


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """Who may call: the API keys (none means anyone), whether health calls are open, and
    Triton's restricted protocol groups (`method_groups`: each RPC's, as it declares it)."""

    api_keys: tuple[str, ...] = ()
    open_health: bool = True
    restrictions: Restrictions = NO_RESTRICTIONS
    method_groups: Mapping[str, ApiGroup] = field(default_factory=dict)

    def restriction_refusal(
        self, method: str, metadata: Iterable[tuple[str, Any]] | None
    ) -> str | None:
        """Triton's message when `method` is in a restricted group and the call lacks its
        metadata; None when it may proceed."""
        group = self.method_groups.get(method)
        if group is None:
            return None
        values = {key: value for key, value in metadata or () if isinstance(value, str)}
        return self.restrictions.refusal(group, values, protocol=True)

    def allows(self, method: str, metadata: Iterable[tuple[str, Any]] | None) -> bool:
        if not self.api_keys or (self.open_health and method in HEALTH_METHODS):
            return True
        presented = bearer_token(metadata)
        return presented is not None and any(
            hmac.compare_digest(presented.encode(), key.encode()) for key in self.api_keys
        )


def bearer_token(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def metadata_value(metadata: Iterable[tuple[str, Any]] | None, name: str) -> str | None:
    for key, value in metadata or ():
        if key == name and isinstance(value, str):
            return value[:128]
    return None


class FrontendInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each unary and bidirectional handler: refuses calls without a valid key (and new
    inference calls while draining), counts every call by status code, and writes one
    access-log line per unary call (a stream's requests log themselves)."""

    def __init__(
        self, registry: ModelRegistry, metrics: GrpcMetrics, policy: AccessPolicy, log_prompts: bool
    ) -> None:
        self._registry = registry
        self._metrics = metrics
        self._policy = policy
        self._log_prompts = log_prompts

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        method, metadata = details.method, details.invocation_metadata
        if method == LOAD_METHOD:
            handler = bounded_load_handler(handler, self._registry.override_limits.max_files)
        refusal = None
        restricted = self._policy.restriction_refusal(method, metadata)
        if restricted is not None:
            refusal = (grpc.StatusCode.UNAVAILABLE, restricted)
        elif not self._policy.allows(method, metadata):
            refusal = (grpc.StatusCode.UNAUTHENTICATED, UNAUTHORIZED_MESSAGE)
        elif method in INFERENCE_METHODS and self._registry.draining:
            refusal = (grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN_MESSAGE)
        if handler.unary_unary is not None:
            behavior = self._observed(method, metadata, handler.unary_unary, refusal, log_call=True)
            return grpc.unary_unary_rpc_method_handler(
                behavior, handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_stream is not None:
            behavior = self._observed(
                method, metadata, handler.stream_stream, refusal, log_call=refusal is not None
            )
            return grpc.stream_stream_rpc_method_handler(
                behavior, handler.request_deserializer, handler.response_serializer
            )
        return handler

    def _observed(
        self,
        method: str,
        metadata: Any,
        behavior: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
        refusal: tuple[grpc.StatusCode, str] | None,
        log_call: bool,
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
        async def observed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                if refusal is not None:
                    await context.abort(*refusal)
                response = await behavior(request, context)
                if context.cancelled():
                    code = grpc.StatusCode.CANCELLED
                return response
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception:
                code = grpc.StatusCode.CANCELLED if context.cancelled() else grpc.StatusCode.UNKNOWN
                raise
            finally:
                self._metrics.call_ended(method, code, time.perf_counter() - started)
                if log_call:
                    request_id = metadata_value(metadata, REQUEST_ID_METADATA) or uuid.uuid4().hex
                    record = RequestLog(
                        request_id=request_id, method=ACCESS_LOG_METHOD, path=method
                    )
                    record.started, record.status = started, code.value[0]
                    write_access_log(record, self._log_prompts)

        return observed
