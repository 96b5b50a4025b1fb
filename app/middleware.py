"""Pure ASGI middleware (streaming-safe): request body size limit and API-key authentication."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import ServerError, UnauthorizedError, error_response


class PayloadTooLargeError(ServerError):
    status_code = 413


class BodySizeLimitMiddleware:
    """Answer 413 to bodies above `max_bytes`, by Content-Length or as they stream in."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLargeError(f"request body is larger than {self.max_bytes} bytes")
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await error_response(too_large)(scope, receive, send)
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
            await error_response(too_large)(scope, receive, send)


class ApiKeyMiddleware:
    """Require `Authorization: Bearer <key>` for every route but the open ones."""

    def __init__(self, app: ASGIApp, keys: Iterable[str], open_prefixes: Iterable[str]) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]
        self.open_prefixes = tuple(open_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] == "OPTIONS"
            or scope["path"].startswith(self.open_prefixes)
            or self.authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        error = UnauthorizedError("missing or invalid API key: send `Authorization: Bearer <key>`")
        await error_response(error)(scope, receive, send)

    def authorized(self, scope: Scope) -> bool:
        value = header(scope, b"authorization") or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        presented = token.strip().encode()
        return any(hmac.compare_digest(presented, key) for key in self.keys)


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None
