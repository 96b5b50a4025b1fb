"""Pure ASGI middleware (streaming-safe): request body size limit and API-key authentication."""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PayloadTooLargeError, UnauthorizedError
from app.http.errors import TRITON_ERRORS, ErrorBodies, error_response


class BodySizeLimitMiddleware:
    """Answer 413 to bodies above `max_bytes`, by Content-Length or as they stream in."""

    def __init__(self, app: ASGIApp, max_bytes: int, errors: ErrorBodies = TRITON_ERRORS) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.errors = errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLargeError(f"request body is larger than {self.max_bytes} bytes")
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await error_response(too_large, scope["path"], self.errors)(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except PayloadTooLargeError:
            if started:
                raise
            await error_response(too_large, scope["path"], self.errors)(scope, receive, send)


class ApiKeyMiddleware:
    """Require `Authorization: Bearer <key>` for every route but the open ones.

    GET requests to paths matching `query_key_path` (the EventSource stream, whose client
    cannot send headers) may carry the key as the query parameter `query_key_name` instead.
    """

    def __init__(
        self,
        app: ASGIApp,
        keys: Iterable[str],
        open_prefixes: Iterable[str],
        open_paths: Iterable[str] = (),
        query_key_path: re.Pattern[str] | None = None,
        query_key_name: str = "api_key",
        errors: ErrorBodies = TRITON_ERRORS,
    ) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]
        self.open_prefixes = tuple(open_prefixes)
        self.open_paths = frozenset(open_paths)
        self.query_key_path = query_key_path
        self.query_key_name = query_key_name
        self.errors = errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] == "OPTIONS"
            or scope["path"] in self.open_paths
            or scope["path"].startswith(self.open_prefixes)
            or self.authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        error = UnauthorizedError("missing or invalid API key: send `Authorization: Bearer <key>`")
        await error_response(error, scope["path"], self.errors)(scope, receive, send)

    def authorized(self, scope: Scope) -> bool:
        return self.valid(bearer_token(scope)) or self.valid(self.query_key(scope))

    def valid(self, presented: str | None) -> bool:
        if not presented:
            return False
        token = presented.encode()
        return any(hmac.compare_digest(token, key) for key in self.keys)

    def query_key(self, scope: Scope) -> str | None:
        """The key from the query string, on the routes that take it there."""
        if (
            self.query_key_path is None
            or scope["method"] != "GET"
            or not self.query_key_path.fullmatch(scope["path"])
        ):
            return None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        values = query.get(self.query_key_name, [])
        return values[0].strip() if len(values) == 1 else None


def bearer_token(scope: Scope) -> str | None:
    value = header(scope, b"authorization") or ""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip()


def header(scope: Scope, name: bytes) -> str | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


class FrontendProcessHeader:
    """`X-Frontend-Process: N` on every response of frontend process N of several, so that a
    client (or a test) sees which process answered."""

    def __init__(self, app: ASGIApp, index: int) -> None:
        self.app = app
        self._header = (b"x-frontend-process", str(index).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self._header]
            await send(message)

        await self.app(scope, receive, send_with_header)
