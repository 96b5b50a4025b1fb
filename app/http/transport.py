"""How the HTTP port accepts connections: TLS, and the limits each connection is held to
(app/http/connections.py), as uvicorn's options."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.http.connections import ConnectionLimits, ConnectionTable, GuardedHttpProtocol
from app.settings import Settings


@dataclass(frozen=True)
class HttpTransport:
    """How the HTTP port accepts connections: TLS (with client certificates when
    `client_ca` is set), the limits on each connection (deadlines, head size, how many are
    open) and how long an idle connection is kept for the next request."""

    certfile: Path | None = None
    keyfile: Path | None = None
    client_ca: Path | None = None
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    keep_alive: float = 75.0

    def uvicorn_options(self) -> dict[str, Any]:
        """uvicorn.Config's options; each call has its own table of open connections."""
        protocol = type(
            "HttpProtocol",
            (GuardedHttpProtocol,),
            {"limits": self.limits, "table": ConnectionTable(self.limits.max_connections)},
        )
        options: dict[str, Any] = {"http": protocol, "timeout_keep_alive": self.keep_alive}
        if self.certfile is not None:
            options.update(ssl_certfile=str(self.certfile), ssl_keyfile=str(self.keyfile))
        if self.client_ca is not None:
            options.update(ssl_ca_certs=str(self.client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
        return options


def http_transport(settings: Settings) -> HttpTransport:
    """The HTTP port's TLS and each connection's limits, as the settings say."""
    limits = ConnectionLimits(
        settings.http_header_timeout_seconds,
        settings.max_request_header_bytes,
        settings.http_body_timeout_seconds,
        settings.max_http_connections,
    )
    return HttpTransport(
        settings.http_ssl_certfile,
        settings.http_ssl_keyfile,
        settings.http_ssl_ca_certs,
        limits,
        settings.http_keep_alive_seconds,
    )
