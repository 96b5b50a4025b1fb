"""Media URLs in OpenAI content (`image_url`, `video_url`, `audio_url`, `input_image`): the
server fetches a remote one only from a host the model's `allowed_media_domains` lists.

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
    "REDIRECTS_VARIABLE",
    "ListedHostsConnector",
    "use_listed_hosts",
]

CONNECTOR_NAME = "listed-hosts"
"""This connector's name in vLLM's registry (`VLLM_MEDIA_CONNECTOR`)."""
ANY_HOST = "*"
"""In `allowed_media_domains`: fetch from any host (vLLM's own default, chosen explicitly)."""
CONNECTOR_VARIABLE = "VLLM_MEDIA_CONNECTOR"
REDIRECTS_VARIABLE = "VLLM_MEDIA_URL_ALLOW_REDIRECTS"

REMOTE_OFF = (
    "remote media URLs are off for this model: send the media inline as a data: URL, or "
    "list the hosts the server may fetch from in its model.json `allowed_media_domains`"
)
FIELD_BY_MEDIA = {"Image": "image_url", "Video": "video_url", "Audio": "audio_url"}
"""The content field of a URL, by the start of the name of vLLM's reader of its media."""


@MEDIA_CONNECTOR_REGISTRY.register(CONNECTOR_NAME)
class ListedHostsConnector(MediaConnector):
    """vLLM's connector, but an http(s) URL is fetched only from a listed host (any, with
    `"*"`); the refusal is a `ValueError`, as vLLM's own refusals of a URL are."""

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


def use_listed_hosts() -> None:
    """Make this connector the one vLLM's chat and Responses parsing load (unless the operator
    named one in `VLLM_MEDIA_CONNECTOR`), and keep a listed host from redirecting the fetch
    elsewhere (unless `VLLM_MEDIA_URL_ALLOW_REDIRECTS` says otherwise)."""
    os.environ.setdefault(CONNECTOR_VARIABLE, CONNECTOR_NAME)
    os.environ.setdefault(REDIRECTS_VARIABLE, "0")
