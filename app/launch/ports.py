"""The ports the server listens on, taken before any engine starts (as `vllm serve` binds
before it loads): the HTTP port bound and kept for uvicorn, the gRPC and metrics ports checked
by binding them. A port that cannot be had stops the start at once, in one line that names
the port and the setting and flag that chose it."""

from __future__ import annotations

import errno
import logging
import socket
from dataclasses import dataclass, replace

from app.settings import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listener:
    """One service's address and port, and the settings (and flags) that chose them."""

    service: str
    host: str
    port: int
    port_names: str
    address_names: str
    reuse_port: bool = False

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class PortUnavailable(Exception):
    """A port the server cannot listen on; the message is one line naming it."""


def listeners(settings: Settings) -> list[Listener]:
    """The services that listen, with these settings: HTTP, gRPC and the metrics port."""
    host = settings.host
    found = []
    if settings.allow_http:
        found.append(
            Listener("HTTP", host, settings.port, "PORT / --http-port", "HOST / --http-address")
        )
    if settings.allow_grpc and settings.grpc_port:
        grpc_host = settings.grpc_address or host
        found.append(
            own_port_listener(
                "gRPC", "grpc", grpc_host, settings.grpc_port, reuse_port=settings.grpc_reuse_port
            )
        )
    if settings.allow_metrics and settings.metrics_port:
        metrics_host = settings.metrics_address or host
        found.append(own_port_listener("metrics", "metrics", metrics_host, settings.metrics_port))
    return found


def own_port_listener(
    service: str, setting: str, host: str, port: int, reuse_port: bool = False
) -> Listener:
    """A service chosen by its own `<setting>_port` and `<setting>_address` settings and their
    flags (`--<setting>-port`, `--<setting>-address`)."""
    name = setting.upper()
    return Listener(
        service,
        host,
        port,
        f"{name}_PORT / --{setting}-port",
        f"{name}_ADDRESS / --{setting}-address",
        reuse_port=reuse_port,
    )


def bind(listener: Listener) -> socket.socket:
    """A socket bound to the listener's address (as uvicorn binds: SO_REUSEADDR; SO_REUSEPORT
    where the service shares its port), or `PortUnavailable`."""
    host = listener.host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if listener.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, listener.port))
    except (OSError, OverflowError) as exc:
        sock.close()
        raise PortUnavailable(unavailable(listener, exc)) from None
    sock.set_inheritable(True)
    return sock


def unavailable(listener: Listener, exc: Exception) -> str:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return (
            f"port {listener.port} ({listener.port_names}) is in use: {reason}; stop what "
            f"listens there or choose another {listener.service} port"
        )
    return (
        f"cannot listen for {listener.service} on {listener.address} "
        f"({listener.address_names}, {listener.port_names}): {reason}"
    )


def claim(settings: Settings, keep_http: bool) -> socket.socket | None:
    """Bind every port of `settings` at once (`PortUnavailable` for the first that cannot
    be had); keep the HTTP socket if `keep_http` (returned), release the others."""
    bound: list[tuple[Listener, socket.socket]] = []
    for listener in listeners(settings):
        try:
            sock = bind(listener)
        except PortUnavailable:
            for _, taken in bound:
                taken.close()
            raise
        bound.append((listener, sock))
    http = None
    for listener, sock in bound:
        if listener.service == "HTTP" and keep_http:
            http = sock
        else:
            sock.close()
    return http


def ports_line(settings: Settings, http: socket.socket | None) -> str:
    """Every service's address and port, for the start-up log (the HTTP port as bound)."""
    parts = []
    for listener in listeners(settings):
        if listener.service == "HTTP" and http is not None:
            listener = replace(listener, port=http.getsockname()[1])
        parts.append(f"{listener.service} {listener.address}")
    return "ports: " + (", ".join(parts) if parts else "none (every service is off)")
