"""A local HTTP server that records the paths it is asked for: what a media fetch reached."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["MediaHost", "media_host_serving"]


class MediaHost:
    """Answers every path with `body` (a 404 without one), `/jump` with a redirect to
    `redirect_to`; `paths` lists what it was asked for."""

    def __init__(self, body: bytes | None = None, content_type: str = "image/png") -> None:
        self.paths: list[str] = []
        self.redirect_to = ""
        host = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                host.paths.append(self.path)
                if self.path == "/jump" and host.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", host.redirect_to)
                    self.end_headers()
                    return
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def media_host_serving(body: bytes | None = None) -> Iterator[MediaHost]:
    """A `MediaHost` for the block's time."""
    host = MediaHost(body)
    try:
        yield host
    finally:
        host.close()
