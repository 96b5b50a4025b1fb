"""Media URLs in OpenAI content: vLLM's own connector class, loaded from vLLM's registry as its
chat and Responses parsing load it, fetches from a host only where the model lists it, and
reads an image only within the server's pixel bound. Each case runs a real HTTP server that
records what it was asked for: a refused URL is never requested (no request to the server's
own network, the SSRF this guards against)."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from app.engine.vllm_openai.media import (
    CONNECTOR_NAME,
    CONNECTOR_VARIABLE,
    PIXELS_VARIABLE,
    REDIRECTS_VARIABLE,
    guard_media,
)
from tests.support.media_host import MediaHost, media_host_serving

try:  # 0.32
    from vllm.multimodal.media import MEDIA_CONNECTOR_REGISTRY, ImageMediaIO
except ImportError:  # 0.25
    from vllm.multimodal.image import ImageMediaIO  # type: ignore[no-redef,attr-defined]
    from vllm.multimodal.utils import (  # type: ignore[no-redef,attr-defined]
        MEDIA_CONNECTOR_REGISTRY,
    )


MAX_PIXELS = 4096 * 4096


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (2, 2), "red").save(buffer, format="PNG")
    return buffer.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG claiming `width` x `height` pixels, with none: what a decoder would allocate for
    is known from its header, before any pixel is decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"") + chunk(b"IEND", b"")


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


@pytest.fixture
def media_host() -> Iterator[MediaHost]:
    with media_host_serving(png()) as host:
        yield host


@pytest.fixture(autouse=True)
def server_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment as the server sets it at start, with the default pixel bound."""
    for variable in (CONNECTOR_VARIABLE, REDIRECTS_VARIABLE, PIXELS_VARIABLE):
        monkeypatch.delenv(variable, raising=False)
    guard_media(MAX_PIXELS)


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
    with media_host_serving(png()) as elsewhere:
        media_host.redirect_to = elsewhere.url + "/secret"
        with pytest.raises(ValueError, match="image"):  # the redirect's empty body
            fetch(["127.0.0.1"], media_host.url + "/jump")
        assert media_host.paths == ["/jump"]
        assert elsewhere.paths == []


def test_inline_data_urls_are_read_with_no_host_listed() -> None:
    assert fetch(None, data_url(png())).size == (2, 2)


def test_an_image_over_the_pixel_bound_is_refused_from_its_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    over = r"4097x4096 \(16781312 pixels\) exceed the maximum of 16777216 pixels"
    with pytest.raises(ValueError, match=over):
        fetch(None, data_url(png_header(4097, 4096)))
    monkeypatch.setenv(PIXELS_VARIABLE, str(4097 * 4096))
    with pytest.raises(ValueError, match="Failed to load image"):  # a header and no pixels
        fetch(None, data_url(png_header(4097, 4096)))


def test_a_fetched_image_is_bounded_too(
    media_host: MediaHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PIXELS_VARIABLE, "3")
    with pytest.raises(ValueError, match="2x2 \\(4 pixels\\) exceed the maximum of 3"):
        fetch(["127.0.0.1"], media_host.url + "/cat.png")
    assert media_host.paths == ["/cat.png"]


def test_the_server_chooses_this_connector_no_redirects_and_its_pixel_bound() -> None:
    assert os.environ["VLLM_MEDIA_CONNECTOR"] == CONNECTOR_NAME
    assert os.environ["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"
    assert os.environ["VLLM_MAX_IMAGE_PIXELS"] == str(MAX_PIXELS)


def test_the_operators_own_choices_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONNECTOR_VARIABLE, "http")
    monkeypatch.setenv(REDIRECTS_VARIABLE, "1")
    monkeypatch.setenv(PIXELS_VARIABLE, "5")
    guard_media(MAX_PIXELS)
    assert os.environ[CONNECTOR_VARIABLE] == "http"
    assert os.environ[REDIRECTS_VARIABLE] == "1"
    assert os.environ[PIXELS_VARIABLE] == "5"
