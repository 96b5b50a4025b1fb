"""HTTP connections as uvicorn runs them, with TLS and a deadline for a request's headers:
a client that sends them too slowly (or nothing at all) cannot hold a connection forever."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that closes a connection whose request headers have
    not all arrived `header_timeout` seconds after the connection opened or the request's
    first byte (uvicorn's keep-alive timeout covers idle connections between requests)."""

    header_timeout = 30.0
    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_deadline()

    def on_headers_complete(self) -> None:
        self._disarm_header_deadline()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(
                self.header_timeout, self._headers_too_slow
            )

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing():
            self.transport.close()


@dataclass(frozen=True)
class HttpTransport:
    """How the HTTP port accepts connections: TLS (with client certificates when
    `client_ca` is set), the request-header deadline and how long an idle connection is
    kept for the next request."""

    certfile: Path | None = None
    keyfile: Path | None = None
    client_ca: Path | None = None
    header_timeout: float = 30.0
    keep_alive: float = 75.0

    def uvicorn_options(self) -> dict[str, Any]:
        protocol = type(
            "HttpProtocol", (HeaderDeadlineProtocol,), {"header_timeout": self.header_timeout}
        )
        options: dict[str, Any] = {"http": protocol, "timeout_keep_alive": self.keep_alive}
        if self.certfile is not None:
            options.update(ssl_certfile=str(self.certfile), ssl_keyfile=str(self.keyfile))
        if self.client_ca is not None:
            options.update(ssl_ca_certs=str(self.client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
        return options
