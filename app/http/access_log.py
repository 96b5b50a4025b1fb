"""The access-log middleware: a request id in and out, one access-log line per request."""

from __future__ import annotations

import contextvars
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.access_log import RequestLog, write_access_log

REQUEST_ID_HEADER = "x-request-id"
SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:+=/-]{1,128}")

current_request: contextvars.ContextVar[RequestLog | None] = contextvars.ContextVar(
    "current_request", default=None
)
"""The running request's access-log record, for the route that serves it."""


class AccessLogMiddleware:
    """Pure ASGI middleware (streaming-safe): the line is written when the response ends."""

    def __init__(self, app: ASGIApp, log_prompts: bool = False) -> None:
        self.app = app
        self.log_prompts = log_prompts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope) or uuid.uuid4().hex
        record = RequestLog(request_id=request_id, method=scope["method"], path=scope["path"])
        token = current_request.set(record)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request.reset(token)
            write_access_log(record, self.log_prompts)


def request_id_from(scope: Scope) -> str | None:
    """The client's X-Request-ID when it is a safe id; anything else is replaced by a
    generated id."""
    for name, value in scope.get("headers", []):
        if name == REQUEST_ID_HEADER.encode():
            return safe_request_id(value.decode("latin-1"))
    return None


def safe_request_id(value: str) -> str | None:
    """`value` as a request id if it is a safe one (letters, digits, `._:+=/-`, at most 128
    characters), else None."""
    text = value.strip()
    return text if SAFE_REQUEST_ID.fullmatch(text) else None
