"""The gRPC server: grpc.aio in the HTTP server's event loop, on the same runtime."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2_grpc
from tritonclient.grpc import service_pb2_grpc

from app.grpc.observe import AccessPolicy, FrontendInterceptor, GrpcMetrics
from app.grpc.servicer import HealthServicer, InferenceServicer, method_groups
from app.grpc.trace_context import TraceContextInterceptor
from app.runtime import Runtime
from app.security.restrictions import NO_RESTRICTIONS, Restrictions

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """Triton's --grpc-use-ssl: the server's PEM certificate chain and key, and with
    `mutual` (--grpc-use-ssl-mutual) the CA certificates that must sign each client's."""

    server_cert: Path
    server_key: Path
    root_cert: Path | None = None
    mutual: bool = False

    def credentials(self) -> grpc.ServerCredentials:
        root = self.root_cert.read_bytes() if self.root_cert is not None else None
        return grpc.ssl_server_credentials(
            [(self.server_key.read_bytes(), self.server_cert.read_bytes())],
            root_certificates=root,
            require_client_auth=self.mutual,
        )


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    """Where to listen, who may call, and the channel options (Triton's defaults)."""

    host: str = "0.0.0.0"
    port: int = 8001
    api_keys: tuple[str, ...] = ()
    open_health: bool = True
    restrictions: Restrictions = NO_RESTRICTIONS
    log_prompts: bool = False
    max_receive_message_bytes: int = 8 * 1024 * 1024
    max_send_message_bytes: int = INT32_MAX
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connections: int = 4096
    """Connections past it are closed as they open: gRPC clients cannot take the open files
    that HTTP and the engines need."""
    max_calls: int = 4096
    """Calls open at once (an idle stream holds some 20 KB): more are RESOURCE_EXHAUSTED."""
    max_connection_idle_ms: int = 300_000
    """A connection without a call for this long gets a GOAWAY (a held slot is given back)."""
    handshake_timeout_ms: int = 30_000
    """A connection that has not begun HTTP/2 (and TLS) within it is closed: a client that
    opens one and stays silent cannot hold a slot for grpc's own two minutes."""
    tls: GrpcTls | None = None
    reuse_port: bool = False
    """SO_REUSEPORT: let several server processes share the port (the kernel spreads the
    connections). Off by default, so that a second server on a taken port fails to start."""

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"

    def channel_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_receive_message_length", self.max_receive_message_bytes),
            ("grpc.max_send_message_length", self.max_send_message_bytes),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.keepalive_permit_without_calls)),
            ("grpc.http2.max_pings_without_data", self.http2_max_pings_without_data),
            (
                "grpc.http2.min_recv_ping_interval_without_data_ms",
                self.http2_min_recv_ping_interval_without_data_ms,
            ),
            ("grpc.http2.max_ping_strikes", self.http2_max_ping_strikes),
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.max_connection_idle_ms", self.max_connection_idle_ms),
            ("grpc.server_handshake_timeout_ms", self.handshake_timeout_ms),
            ("grpc.so_reuseport", int(self.reuse_port)),
        ]


class GrpcServer:
    """Triton's gRPC service and the standard health service on one port; started and
    stopped by the process that also runs the HTTP server (in its event loop)."""

    def __init__(self, runtime: Runtime, options: GrpcOptions) -> None:
        self._runtime = runtime
        self.options = options
        self._metrics = GrpcMetrics(runtime.metrics_registry)
        self._server: grpc.aio.Server | None = None
        self.port: int | None = None

    async def start(self) -> None:
        """Bind and start serving; a port that cannot be bound stops start-up."""
        options = self.options
        interceptor = FrontendInterceptor(
            self._runtime.registry,
            self._metrics,
            AccessPolicy(
                options.api_keys, options.open_health, options.restrictions, method_groups()
            ),
            options.log_prompts,
        )
        interceptors = [interceptor, TraceContextInterceptor()]
        server = grpc.aio.server(
            interceptors=interceptors,
            options=options.channel_options(),
            maximum_concurrent_rpcs=options.max_calls,
        )
        inference = InferenceServicer(self._runtime, self._metrics, options.log_prompts)
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(inference, server)
        health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(inference), server)
        try:
            if options.tls is None:
                self.port = server.add_insecure_port(options.address)
            else:
                self.port = server.add_secure_port(options.address, options.tls.credentials())
        except RuntimeError as exc:
            raise RuntimeError(f"gRPC: cannot listen on {options.address}: {exc}") from exc
        await server.start()
        self._server = server
        logger.info(
            "Started GRPCInferenceService at %s", GrpcOptions(options.host, self.port).address
        )

    async def stop(self, grace: float) -> None:
        """Refuse new calls; running ones may finish for `grace` seconds, then are cancelled."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
