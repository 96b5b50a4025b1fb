"""Harnesses that drive the app as a real client would: by hand over ASGI, or under uvicorn."""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
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
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": headers or [],
        "client": ("test", 1),
        "server": ("test", 80),
        "root_path": "",
        "app": app,
    }
    task = asyncio.create_task(app(scope, receive, send))
    await asyncio.sleep(seconds)
    disconnect.set()
    await asyncio.wait_for(task, timeout=5)
    return sent


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel numbers outgoing connections and `bind(0)` sockets from."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


TEST_PORTS = range(20000, min(ephemeral_range()[0], 32768))
"""Where test servers listen: below the ephemeral range, so that no socket the kernel numbers
(a client's connection, an engine's ZMQ or torch.distributed port) takes a server's port in
the 20 s between choosing it and the server's bind, after its engine has started."""
handed_out: set[int] = set()


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` free ports, none handed out before in this test run."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.choice(TEST_PORTS)
        if port not in handed_out and bindable(port):
            handed_out.add(port)
            ports.append(port)
    return ports


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@contextmanager
def serve_in_thread(app: Any, side: Any = None, port: int | None = None) -> Iterator[str]:
    """The app under uvicorn in a thread, on a free port; yields its base URL. A side server
    (the gRPC frontend) runs in the same event loop, as `python -m app` runs it."""
    from app.launch.server import DrainingServer

    port = port or free_port()
    transport = getattr(getattr(app, "state", None), "http_transport", None)
    options = transport.uvicorn_options() if transport is not None else {}
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **options)
    server = uvicorn.Server(config) if side is None else DrainingServer(config, app, side)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start"
    scheme = "https" if "ssl_certfile" in options else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
