"""Which of Triton's API groups an HTTP route belongs to, and which routes change the
server's state (and so must never be reachable from another origin's web page)."""

from __future__ import annotations

import re

from app.security.restrictions import ApiGroup

MODEL = r"/v2/models/[^/]+(?:/versions/[^/]+)?"
"""A model's path, with or without a version."""

ROUTE_GROUPS: tuple[tuple[re.Pattern[str], ApiGroup], ...] = tuple(
    (re.compile(pattern), group)
    for pattern, group in (
        (r"/v2/health/(?:live|ready)|/health|/ping", ApiGroup.HEALTH),
        (MODEL + r"/ready", ApiGroup.HEALTH),
        (r"/v2/models/stats|" + MODEL + r"/stats", ApiGroup.STATISTICS),
        (MODEL + r"/config", ApiGroup.MODEL_CONFIG),
        (MODEL + r"/(?:generate|generate_stream|infer)", ApiGroup.INFERENCE),
        (r"/v2/trace/setting|" + MODEL + r"/trace/setting", ApiGroup.TRACE),
        (r"/v2/logging", ApiGroup.LOGGING),
        (r"/v2/repository(?:/.*)?", ApiGroup.MODEL_REPOSITORY),
        (r"/v2/(?:system|cuda)sharedmemory(?:/.*)?", ApiGroup.SHARED_MEMORY),
        (r"/v2|" + MODEL + r"|/version", ApiGroup.METADATA),
        # As Triton's OpenAI frontend: the model list is the repository's, the rest inference.
        (r"/v1/models(?:/.*)?|/v1/(?:load|unload)_lora_adapter", ApiGroup.MODEL_REPOSITORY),
        (r"/v1/.+|/tokenize|/detokenize", ApiGroup.INFERENCE),
    )
)

STATE_CHANGING = re.compile(
    r"/v2/repository/models/[^/]+/(?:load|unload)|/v2/trace/setting|"
    + MODEL
    + r"/trace/setting|/v2/logging|/v1/(?:load|unload)_lora_adapter"
)
"""Routes whose POST changes what the server serves or how it records."""


def api_group(path: str) -> ApiGroup | None:
    """The group of the route at `path`; None for routes in no group (docs, playground,
    metrics)."""
    for pattern, group in ROUTE_GROUPS:
        if pattern.fullmatch(path):
            return group
    return None


def changes_state(method: str, path: str) -> bool:
    return method == "POST" and STATE_CHANGING.fullmatch(path) is not None
