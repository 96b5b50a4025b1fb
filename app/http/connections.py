"""HTTP connections as uvicorn runs them, each bounded in time and size: a deadline for a
request's head, a size limit on it (431), a deadline for its body, and a cap on open
connections that closes the one waiting longest on its client. A client that is slow, silent
or sends too much cannot hold the server's memory or keep others out."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

logger = logging.getLogger(__name__)

LINGER_SECONDS = 2.0
"""After a refusal the protocol layer answers itself: how long the rest of what the client
sends is read and dropped, so that the answer reaches it before the connection closes (a
socket closed with unread data resets the connection, and the client may lose the answer)."""
BODY_GRACE_SECONDS = 5.0
"""After the body deadline: how long the app has to answer 408 before the connection closes."""
REPORT_INTERVAL_SECONDS = 60.0
"""Connections closed over the cap are logged at most once in this time."""


@dataclass(frozen=True)
class ConnectionLimits:
    """What one HTTP connection may take: time for a request's head and body, bytes of
    head, and how many connections may be open at once."""

    header_timeout: float = 30.0
    max_header_bytes: int = 64 * 1024
    body_timeout: float = 60.0
    max_connections: int = 4096


class ConnectionTable:
    """The open connections, and those waiting on their client (for a request's head or
    body, or idle between requests) in the order they began to wait. Beyond `limit` open
    connections, the one waiting longest is the one to close: connections whose request is
    being served are never chosen, and a health probe's new connection sends its request at
    once, so it is served while slow or idle clients fill the table."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: set[object] = set()
        self._waiting: dict[object, None] = {}
        self.closed_over_limit = 0
        self._reported_at = -REPORT_INTERVAL_SECONDS

    def opened(self, connection: object) -> object | None:
        """Count a new connection (waiting for its request); the connection to close when
        that makes one too many (possibly this one, when every other is being served)."""
        self._open.add(connection)
        self._waiting[connection] = None
        if len(self._open) <= self.limit:
            return None
        oldest = next(iter(self._waiting))
        self.forget(oldest)
        self.closed_over_limit += 1
        return oldest

    def forget(self, connection: object) -> None:
        self._open.discard(connection)
        self._waiting.pop(connection, None)

    def waiting(self, connection: object) -> None:
        """The connection now waits on its client (kept in its place if it already did)."""
        if connection in self._open and connection not in self._waiting:
            self._waiting[connection] = None

    def serving(self, connection: object) -> None:
        self._waiting.pop(connection, None)

    def __len__(self) -> int:
        return len(self._open)

    def report(self) -> None:
        """Log the connections closed over the limit (at most once per interval)."""
        now = time.monotonic()
        if now - self._reported_at < REPORT_INTERVAL_SECONDS:
            return
        self._reported_at = now
        logger.warning(
            "%d open HTTP connections: closed the one waiting longest on its client "
            "(%d so far; HTTP_MAX_CONNECTIONS)",
            self.limit,
            self.closed_over_limit,
        )


def plain_answer(status: int, message: str) -> bytes:
    """A whole HTTP response with Triton's error body, closing the connection."""
    body = json.dumps({"error": message}).encode()
    head = [
        STATUS_LINE[status],
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        b"connection: close\r\n\r\n",
    ]
    return b"".join(head) + body


class HeadTooLarge(Exception):
    """A request's head grew past the limit (raised inside the parser's callback)."""


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under `ConnectionLimits`: the head must arrive within
    `header_timeout` of the connection or of the request's first byte, and hold at most
    `max_header_bytes` (431 as soon as it grows past them: httptools itself sets no limit);
    the body must arrive within `body_timeout` of the head (the app answers 408; this
    closes the connection a grace period later whatever the app does). uvicorn's keep-alive
    timeout covers idle connections between requests."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    table: ClassVar[ConnectionTable] = ConnectionTable(ConnectionLimits.max_connections)

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._body_deadline: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._reading_head = True
        self._message_complete = False
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline = self.loop.call_later(self.limits.header_timeout, self._too_slow)
        over = self.table.opened(self)
        if isinstance(over, GuardedHttpProtocol):
            self.table.report()
            over.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.table.forget(self)
        self._cancel_deadlines()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """uvicorn's, counting the bytes of a request's head as they arrive."""
        if self._refused:
            return
        self._unset_keepalive_if_required()
        if self._reading_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as error:
            if isinstance(error.__context__, HeadTooLarge):
                self._head_too_large()
                return
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        if self._reading_head and self._head_bytes > self.limits.max_header_bytes:
            self._head_too_large()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._message_complete = False
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.limits.header_timeout, self._too_slow)

    def on_headers_complete(self) -> None:
        self._cancel(self._head_deadline)
        self._head_deadline = None
        self._reading_head = False
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.limits.max_header_bytes:
            raise HeadTooLarge()
        super().on_headers_complete()
        self._body_deadline = self.loop.call_later(
            self.limits.body_timeout + BODY_GRACE_SECONDS, self._too_slow
        )

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._cancel(self._body_deadline)
        self._body_deadline = None
        self._message_complete = True
        self._reading_head = True
        self._head_bytes = 0
        self._update_table()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._update_table()

    def _update_table(self) -> None:
        """Waiting on the client unless its request has all arrived and is being answered."""
        if self._message_complete and self.cycle is not None and not self.cycle.response_complete:
            self.table.serving(self)
        else:
            self.table.waiting(self)

    def _head_too_large(self) -> None:
        limit = self.limits.max_header_bytes
        logger.info("request headers larger than %d bytes: refused (431)", limit)
        self._refuse(431, f"request headers are larger than {limit} bytes")

    def _refuse(self, status: int, message: str) -> None:
        """Answer from here (the app never sees the request), then read and drop what else
        the client sends for a while before closing."""
        self._refused = True
        self._cancel_deadlines()
        self.transport.write(plain_answer(status, message))
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._head_deadline = self.loop.call_later(LINGER_SECONDS, self._too_slow)

    def _too_slow(self) -> None:
        self._head_deadline = self._body_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _cancel_deadlines(self) -> None:
        self._cancel(self._head_deadline)
        self._cancel(self._body_deadline)
        self._head_deadline = self._body_deadline = None

    @staticmethod
    def _cancel(deadline: asyncio.TimerHandle | None) -> None:
        if deadline is not None:
            deadline.cancel()
