"""Ending a background task for sure: Python 3.10's and 3.11's `asyncio.wait_for` returns its
result when a cancellation meets it just as its awaitable completes, swallowing the
cancellation; a loop around it (an engine's health probe) then keeps running."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_wait"]

RECANCEL_SECONDS = 0.5
"""How long a cancelled task gets to end before it is cancelled again."""


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait until it has ended, cancelling it again while it runs on; its
    outcome (result, error or cancellation) is consumed."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_SECONDS)
    if not task.cancelled():
        task.exception()
