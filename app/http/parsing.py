"""Request bodies parsed where their size allows: a large one in a worker thread, so that the
event loop keeps answering (a health probe, other streams) while megabytes of JSON are read
and checked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["LARGE_BODY_BYTES", "parsed"]

LARGE_BODY_BYTES = 256 * 1024
"""Bodies from this size on are parsed off the event loop (a few milliseconds of parsing)."""


async def parsed(parse: Callable[[bytes], T], raw: bytes) -> T:
    """`parse(raw)`, in a worker thread when `raw` is large."""
    if len(raw) < LARGE_BODY_BYTES:
        return parse(raw)
    return await asyncio.to_thread(parse, raw)
