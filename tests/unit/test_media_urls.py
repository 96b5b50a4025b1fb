"""Media URLs in OpenAI content: vLLM's own connector class, loaded from vLLM's registry as its
chat and Responses parsing load it, fetches from a host only where the model lists it. Each
case runs a real HTTP server that records what it was asked for: a refused URL is never
requested (no request to the server's own network, the SSRF this guards against)."""

from __future__ import annotations

import asyncio
import base64
import http.server
import io
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from app.engine.vllm_openai.media import (
    CONNECTOR_NAME,
    CONNECTOR_VARIABLE,
    REDIRECTS_VARIABLE,
    use_listed_hosts,
)

try:  # 0.32
    from vllm.multimodal.media import MEDIA_CONNECTOR_REGISTRY, ImageMediaIO
except ImportError:  # 0.25
    from vllm.multimodal.image import ImageMediaIO  # type: ignore[no-redef,attr-defined]
    from vllm.multimodal.utils import (  # type: ignore[no-redef,attr-defined]
        MEDIA_CONNECTOR_REGISTRY,
    )


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (2, 2), "red").save(buffer, format="PNG")
    return buffer.getvalue()


class MediaHost:
    """A local HTTP server: a PNG at every path, `/jump` a redirect to `redirect_to`."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.redirect_to = ""
        host = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                host.paths.append(self.path)
                if self.path == "/jump":
                    self.send_response(302)
                    self.send_header("Location", host.redirect_to)
                    self.end_headers()
                    return
                body = png()
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
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


@pytest.fixture
def media_host() -> Iterator[MediaHost]:
    host = MediaHost()
    yield host
    host.close()


@pytest.fixture(autouse=True)
def server_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment as the server sets it for its engines."""
    monkeypatch.delenv(CONNECTOR_VARIABLE, raising=False)
    monkeypatch.delenv(REDIRECTS_VARIABLE, raising=False)
    use_listed_hosts()


def connector(hosts: list[str] | None) -> Any:
    return MEDIA_CONNECTOR_REGISTRY.load(CONNECTOR_NAME, allowed_media_domains=hosts)


def fetch(hosts: list[str] | None, url: str) -> Any:
    """The image at `url` as vLLM's synchronous fetch reads it (its asynchronous one keeps an
    HTTP session bound to the first event loop that used it)."""
    return connector(hosts).load_from_url(url, ImageMediaIO())


@pytest.mark.parametrize("hosts", [None, []])
@pytest.mark.parametrize("path", ["/secret", "/jump"])
def test_without_listed_hosts_a_remote_url_is_refused_unrequested(
    media_host: MediaHost, hosts: list[str] | None, path: str
) -> None:
    for url in (media_host.url + path, media_host.url.upper() + path, " " + media_host.url):
        with pytest.raises(ValueError, match=r"^image_url: remote media URLs are off"):
            fetch(hosts, url)
        with pytest.raises(ValueError, match="allowed_media_domains"):
            asyncio.run(connector(hosts).load_from_url_async(url, ImageMediaIO()))
    assert media_host.paths == []


def test_an_unlisted_host_is_refused_unrequested(media_host: MediaHost) -> None:
    with pytest.raises(ValueError, match="allowed domains"):
        fetch(["images.example.com"], media_host.url + "/secret")
    assert media_host.paths == []


@pytest.mark.parametrize("hosts", [["127.0.0.1"], ["*"], ["images.example.com", "*"]])
def test_a_listed_host_or_any_host_is_fetched(media_host: MediaHost, hosts: list[str]) -> None:
    image = fetch(hosts, media_host.url + "/cat.png")
    assert image.size == (2, 2)
    assert media_host.paths == ["/cat.png"]


def test_a_listed_host_cannot_redirect_the_fetch_elsewhere(media_host: MediaHost) -> None:
    elsewhere = MediaHost()
    try:
        media_host.redirect_to = elsewhere.url + "/secret"
        with pytest.raises(ValueError, match="image"):  # the redirect's empty body
            fetch(["127.0.0.1"], media_host.url + "/jump")
        assert media_host.paths == ["/jump"]
        assert elsewhere.paths == []
    finally:
        elsewhere.close()


def test_inline_data_urls_are_read_with_no_host_listed() -> None:
    url = "data:image/png;base64," + base64.b64encode(png()).decode()
    assert fetch(None, url).size == (2, 2)


def test_the_server_chooses_this_connector_and_no_redirects() -> None:
    assert os.environ["VLLM_MEDIA_CONNECTOR"] == CONNECTOR_NAME
    assert os.environ["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"


def test_the_operators_own_choices_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONNECTOR_VARIABLE, "http")
    monkeypatch.setenv(REDIRECTS_VARIABLE, "1")
    use_listed_hosts()
    assert os.environ[CONNECTOR_VARIABLE] == "http"
    assert os.environ[REDIRECTS_VARIABLE] == "1"
