"""Media URLs in OpenAI content (`image_url`, `video_url`, `audio_url`, `input_image`): the
server fetches a remote one only from a host the model's `allowed_media_domains` lists, and
reads an image only within the server's `MAX_IMAGE_PIXELS` (vLLM's own check, from the
image's header), as Triton's path does.

vLLM's own connector fetches any http(s) URL a client names when that list is empty, which
lets a client make the server request its own network (cloud metadata, admin ports). Triton's
backend takes only inline base64 images, so the safe default here is inline data alone:
`data:` URLs always, remote URLs from listed hosts (`"*"`: any host, as `vllm serve`), and
`file:` URLs under `allowed_local_media_path`, as vLLM reads it."""

from __future__ import annotations

import os
from typing import Any

try:  # 0.32
    from vllm.multimodal.media import MEDIA_CONNECTOR_REGISTRY, MediaConnector
except ImportError:  # 0.25
    from vllm.multimodal.utils import (  # type: ignore[no-redef,attr-defined]
        MEDIA_CONNECTOR_REGISTRY,
        MediaConnector,
    )

__all__ = [
    "ANY_HOST",
    "CONNECTOR_NAME",
    "CONNECTOR_VARIABLE",
    "PIXELS_VARIABLE",
    "REDIRECTS_VARIABLE",
    "ListedHostsConnector",
    "guard_media",
]

CONNECTOR_NAME = "listed-hosts"
"""This connector's name in vLLM's registry (`VLLM_MEDIA_CONNECTOR`)."""
ANY_HOST = "*"
"""In `allowed_media_domains`: fetch from any host (vLLM's own default, chosen explicitly)."""
CONNECTOR_VARIABLE = "VLLM_MEDIA_CONNECTOR"
REDIRECTS_VARIABLE = "VLLM_MEDIA_URL_ALLOW_REDIRECTS"
PIXELS_VARIABLE = "VLLM_MAX_IMAGE_PIXELS"
"""vLLM's bound on an image's pixels (and a video frame's), checked from its header."""

REMOTE_OFF = (
    "remote media URLs are off for this model: send the media inline as a data: URL, or "
    "list the hosts the server may fetch from in its model.json `allowed_media_domains`"
)
FIELD_BY_MEDIA = {"Image": "image_url", "Video": "video_url", "Audio": "audio_url"}
"""The content field of a URL, by the start of the name of vLLM's reader of its media."""


@MEDIA_CONNECTOR_REGISTRY.register(CONNECTOR_NAME)
class ListedHostsConnector(MediaConnector):
    """vLLM's connector, but an http(s) URL is fetched only from a listed host (any, with
    `"*"`); the refusal is a `ValueError`, as vLLM's own refusals of a URL are (a 400)."""

    def __init__(self, *args: Any, allowed_media_domains: list[str] | None = None, **kwargs: Any):
        listed = list(allowed_media_domains or [])
        self._any_host = ANY_HOST in listed
        self._hosts = [] if self._any_host else listed
        super().__init__(*args, allowed_media_domains=self._hosts, **kwargs)

    def load_from_url(self, url: str, media_io: Any, **kwargs: Any) -> Any:
        self._check_remote(url, media_io)
        return super().load_from_url(url, media_io, **kwargs)

    async def load_from_url_async(self, url: str, media_io: Any, **kwargs: Any) -> Any:
        self._check_remote(url, media_io)
        return await super().load_from_url_async(url, media_io, **kwargs)

    def _check_remote(self, url: str, media_io: Any) -> None:
        """Refuse a remote URL when no host is listed (vLLM checks a listed host itself)."""
        if self._any_host or self._hosts or url.lstrip()[:4].lower() != "http":
            return
        reader = type(media_io).__name__
        field = next((f for kind, f in FIELD_BY_MEDIA.items() if reader.startswith(kind)), "url")
        raise ValueError(f"{field}: {REMOTE_OFF}")


def guard_media(max_image_pixels: int) -> None:
    """At start, in each process that serves OpenAI requests: make this connector the one
    vLLM's chat and Responses parsing load, keep a listed host from redirecting the fetch
    elsewhere, and bound an image by the server's `max_image_pixels`; each unless the operator
    set vLLM's own variable for it (`VLLM_MEDIA_CONNECTOR`, `VLLM_MEDIA_URL_ALLOW_REDIRECTS`,
    `VLLM_MAX_IMAGE_PIXELS`)."""
    os.environ.setdefault(CONNECTOR_VARIABLE, CONNECTOR_NAME)
    os.environ.setdefault(REDIRECTS_VARIABLE, "0")
    os.environ.setdefault(PIXELS_VARIABLE, str(max_image_pixels))
