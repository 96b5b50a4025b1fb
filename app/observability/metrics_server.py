"""Triton's metrics port (`--metrics-port`, 8002): `GET /metrics` in a thread of its own,
answered by a render function (which reads the metrics on the server's event loop)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Coroutine
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from app.observability.exposition import exposition

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
RENDER_TIMEOUT_SECONDS = 30.0
MAX_CONNECTIONS = 64
"""Connections served at once (a thread each); more are closed as they open. Prometheus
scrapes one at a time."""
CONNECTION_TIMEOUT_SECONDS = 10.0
"""A connection must send its request, and take the answer, within this time of each read or
write: a silent client does not keep its thread."""


class MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsHttpServer

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def _answer(self, with_body: bool) -> None:
        if self.path.split("?", 1)[0] != METRICS_PATH:
            self._send(
                404, b"Not Found. Metrics are at /metrics\n", "text/plain; charset=utf-8", with_body
            )
            return
        try:
            body = self.server.render()
        except Exception as exc:  # noqa: BLE001 - the scrape fails, naming the cause; the port serves on
            logger.error("metrics port: the metrics could not be read: %s", exc)
            self._send(
                500,
                f"the metrics could not be read: {exc}\n".encode(),
                "text/plain; charset=utf-8",
                with_body,
            )
            return
        self._send(200, body, CONTENT_TYPE_LATEST, with_body)

    def _send(self, status: int, body: bytes, content_type: str, with_body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged (Prometheus asks every few seconds)."""


class MetricsHttpServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them, each held to
    `connection_timeout`: a flood of connections costs neither threads nor time."""

    daemon_threads = True
    request_queue_size = 128
    """The listen backlog (socketserver's 5 drops a burst's connections for a second)."""

    def __init__(
        self,
        address: str,
        port: int,
        render: Callable[[], bytes],
        max_connections: int = MAX_CONNECTIONS,
        connection_timeout: float = CONNECTION_TIMEOUT_SECONDS,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        super().__init__((address, port), MetricsHandler)
        self.render = render
        self.connection_timeout = connection_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._thread = threading.Thread(target=self.serve_forever, name="metrics-port", daemon=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection if one is free; else it is closed at once."""
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        request.settimeout(self.connection_timeout)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def on_loop(
    loop: asyncio.AbstractEventLoop, render: Callable[[], Coroutine[Any, Any, bytes]]
) -> Callable[[], bytes]:
    """A render function for the port's threads that runs `render` on `loop` (where the
    metrics live) and waits for it."""

    def rendered() -> bytes:
        future = asyncio.run_coroutine_threadsafe(render(), loop)
        return future.result(RENDER_TIMEOUT_SECONDS)

    return rendered


def serve_metrics(address: str, port: int, collector: Collector) -> MetricsHttpServer:
    """The metrics port, started, reading `collector` on the running event loop."""

    async def render() -> bytes:
        return exposition(collector)

    server = MetricsHttpServer(address, port, on_loop(asyncio.get_running_loop(), render))
    server.start()
    logger.info("Started Metrics Service at %s:%d", address, server.port)
    return server
