"""Harnesses that drive the app as a real client would: by hand over ASGI, or under uvicorn."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

Message = dict[str, Any]


async def call_and_disconnect(
    app: Any,
    method: str,
    path: str,
    *,
    body: bytes = b"",
    query: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    seconds: float = 0.3,
) -> list[Message]:
    """Send one request, read for `seconds`, then disconnect; the messages the app sent."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    disconnect = asyncio.Event()
    sent: list[Message] = []

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query,
        "headers": headers or [], "client": ("test", 1), "server": ("test", 80),
        "root_path": "", "app": app,
    }
    task = asyncio.create_task(app(scope, receive, send))
    await asyncio.sleep(seconds)
    disconnect.set()
    await asyncio.wait_for(task, timeout=5)
    return sent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports (held open together, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@contextmanager
def serve_in_thread(app: Any, side: Any = None, port: int | None = None) -> Iterator[str]:
    """The app under uvicorn in a thread, on a free port; yields its base URL. A side server
    (the gRPC frontend) runs in the same event loop, as `python -m app` runs it."""
    from app.server import DrainingServer

    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config) if side is None else DrainingServer(config, app, side)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
