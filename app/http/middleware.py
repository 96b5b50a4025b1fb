"""Pure ASGI middleware (streaming-safe): request body size limit and deadline, API-key
authentication."""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Iterable
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import OverloadedError, PayloadTooLargeError, ServerError, UnauthorizedError
from app.http.access_log import current_request
from app.http.errors import TRITON_ERRORS, ErrorBodies, error_response

REQUEST_TIMEOUT = 408


class BodySizeLimitMiddleware:
    """Answer 413 to bodies above `max_bytes`, by Content-Length or as they stream in, and
    503 to a body that would take the bodies held by the requests in progress above
    `max_bytes_in_flight` (thousands of connections each sending a large body would
    otherwise hold them all in memory at once)."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        errors: ErrorBodies = TRITON_ERRORS,
        max_bytes_in_flight: int | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.errors = errors
        self.max_bytes_in_flight = max_bytes_in_flight
        self.bytes_in_flight = 0
        """Body bytes received by the requests in progress (held until each one ends)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLargeError(f"request body is larger than {self.max_bytes} bytes")
        declared = header(scope, b"content-length")
        size = int(declared) if declared is not None and declared.isdigit() else 0
        if size > self.max_bytes:
            await error_response(too_large, scope["path"], self.errors)(scope, receive, send)
            return
        if self.over_budget(size):
            await error_response(busy(), scope["path"], self.errors)(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                chunk = len(message.get("body", b""))
                if self.over_budget(chunk):
                    raise busy()
                received += chunk
                self.bytes_in_flight += chunk
                if received > self.max_bytes:
                    raise too_large
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except (PayloadTooLargeError, BodiesInFlightError) as exc:
            if started:
                raise
            await error_response(exc, scope["path"], self.errors)(scope, receive, send)
        finally:
            self.bytes_in_flight -= received

    def over_budget(self, more: int) -> bool:
        limit = self.max_bytes_in_flight
        return limit is not None and more > 0 and self.bytes_in_flight + more > limit


class BodiesInFlightError(OverloadedError):
    """The request bodies in progress hold as many bytes as the server takes at once."""


def busy() -> BodiesInFlightError:
    return BodiesInFlightError(
        "the server is receiving as many request bodies as it takes at once; retry shortly"
    )


class BodyTooSlow(Exception):
    """The request's body did not all arrive in time (raised to the app by `receive`)."""


class BodyDeadline:
    """One request's body deadline: its `receive` raises `BodyTooSlow` once the deadline
    passes while the body is still arriving (a timer cancels the wait: no task per message),
    and has no deadline once the body is in."""

    def __init__(self, receive: Receive, timeout: float) -> None:
        self._receive = receive
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + timeout
        self.arrived = False
        self.expired = False

    async def receive(self) -> Message:
        if self.arrived:
            return await self._receive()
        task = asyncio.current_task()
        assert task is not None
        timer = self._loop.call_at(self._deadline, self._expire, task)
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            if not self.expired:
                raise
            uncancel = getattr(task, "uncancel", None)  # Python 3.11+: the cancel is handled
            if uncancel is not None:
                uncancel()
            raise BodyTooSlow() from None
        finally:
            timer.cancel()
        self.arrived = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    def _expire(self, task: asyncio.Task[object]) -> None:
        self.expired = True
        task.cancel()


class BodyDeadlineMiddleware:
    """Answer 408, closing the connection, when a request's body has not all arrived
    `timeout` seconds after its head (a client trickling its body cannot hold a connection
    and a running request). Whatever the app answers after the deadline is dropped for the
    408; reading after the body (a wait for the client to leave) has no deadline."""

    def __init__(self, app: ASGIApp, timeout: float, errors: ErrorBodies = TRITON_ERRORS) -> None:
        self.app = app
        self.timeout = timeout
        self.errors = errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = BodyDeadline(receive, self.timeout)
        started = False

        async def send_unless_expired(message: Message) -> None:
            nonlocal started
            if deadline.expired and not started:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, deadline.receive, send_unless_expired)
        except Exception:
            if not deadline.expired or started:
                raise
        if deadline.expired and not started:
            await self.answer_too_slow(scope, receive, send)

    async def answer_too_slow(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = ServerError(f"the request body did not arrive within {self.timeout:g} s")
        record = current_request.get()
        if record is not None:
            record.error = error.message
        response = error_response(
            error, scope["path"], self.errors, REQUEST_TIMEOUT, {"Connection": "close"}
        )
        await response(scope, receive, send)


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
