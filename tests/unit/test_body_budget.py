"""The bodies a frontend process holds at once are bounded (MAX_REQUEST_BYTES_IN_FLIGHT):
thousands of connections each sending a large body would otherwise hold them all in memory.
A body that would go over the budget is refused 503 (Retry-After) before it is read further;
the bytes come back when each request ends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from app.http.middleware import BodySizeLimitMiddleware

BUDGET = 1000


class HoldingApp:
    """Reads its whole body, then holds the request until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.read = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body", False):
            pass
        self.read.set()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def scope_of(length: int | None) -> Scope:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    return {"type": "http", "method": "POST", "path": "/v1/completions", "headers": headers}


async def request(
    middleware: BodySizeLimitMiddleware, size: int, declared: bool = True
) -> dict[str, Any]:
    """One request whose body comes in two halves; its status and error message."""
    chunks: list[Message] = [
        {"type": "http.request", "body": b"x" * (size // 2), "more_body": True},
        {"type": "http.request", "body": b"x" * (size - size // 2), "more_body": False},
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await middleware(scope_of(size if declared else None), receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return {"status": sent[0]["status"], "body": body, "headers": dict(sent[0]["headers"])}


async def test_a_body_that_would_go_over_the_budget_is_refused_503_until_bytes_come_back() -> None:
    app = HoldingApp()
    middleware = BodySizeLimitMiddleware(app, max_bytes=BUDGET, max_bytes_in_flight=BUDGET)
    held = asyncio.ensure_future(request(middleware, 600))
    await app.read.wait()
    assert middleware.bytes_in_flight == 600
    for declared in (True, False):  # by Content-Length, or as the body streams in
        refused = await request(middleware, 600, declared)
        assert refused["status"] == 503 and refused["headers"][b"retry-after"] == b"1"
        assert "request bodies" in json.loads(refused["body"])["error"]
        assert middleware.bytes_in_flight == 600
    app.release.set()
    assert (await held)["status"] == 200
    assert middleware.bytes_in_flight == 0
    assert (await request(middleware, 600))["status"] == 200


async def test_without_a_budget_bodies_are_bounded_one_by_one_only() -> None:
    app = HoldingApp()
    app.release.set()
    middleware = BodySizeLimitMiddleware(app, max_bytes=BUDGET)
    assert [(await request(middleware, 900))["status"] for _ in range(3)] == [200] * 3
    assert (await request(middleware, BUDGET + 1))["status"] == 413
