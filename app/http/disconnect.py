"""Watching the client while a response is prepared: cancel the work when it leaves."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")
CLIENT_CLOSED_REQUEST = 499
"""The status logged for a request whose client left before the response (nginx's)."""


class ClientDisconnected(Exception):
    """The client went away before the response was ready."""


async def until_disconnect(request: Request, awaitable: Awaitable[T]) -> T:
    """Await `awaitable`, cancelling it (and so aborting its engine request) if the client
    leaves."""
    work = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            return work.result()
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        raise ClientDisconnected()
    finally:
        watcher.cancel()
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)


async def wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
