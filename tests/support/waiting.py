"""Waiting for a condition, in threads and in event loops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], timeout: float = 5, interval: float = 0.05) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def wait_until(condition: Callable[[], bool], timeout: float = 5) -> None:
    """Like `wait_for`, failing the test when the condition never holds."""
    assert wait_for(condition, timeout, interval=0.01), "condition not met in time"


async def eventually(
    condition: Callable[[], bool], timeout: float = 1, interval: float = 0.02
) -> bool:
    """`wait_for` inside an event loop (the loop keeps running while it waits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(interval)
    return condition()
