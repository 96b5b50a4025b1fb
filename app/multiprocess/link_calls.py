"""The calls of the link between the supervisor and its frontend processes, sent by value."""

from __future__ import annotations

import enum


class LinkCall(str, enum.Enum):
    """What one side of the link asks of the other. A frontend process asks the supervisor to
    `HELLO` (join), `READY`, `ACQUIRE` and `RELEASE` engine cores, `GATHER` every frontend
    process's answer to a call or `SHARE` a change with the others; the supervisor asks the
    frontend processes for their `METRICS` and passes on a shared `LOAD`, `UNLOAD`,
    `LOG_SETTINGS` or `TRACE_SETTING` change."""

    HELLO = "hello"
    READY = "ready"
    ACQUIRE = "acquire"
    RELEASE = "release"
    GATHER = "gather"
    SHARE = "share"
    METRICS = "metrics"
    LOAD = "load"
    UNLOAD = "unload"
    LOG_SETTINGS = "log_settings"
    TRACE_SETTING = "trace_setting"
