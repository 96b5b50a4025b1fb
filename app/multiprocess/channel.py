"""Calls both ways over one stream: JSON lines, each call answered by its id."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]
STREAM_LIMIT = 64 * 1024 * 1024
"""Largest message (a metrics exposition or a load override with files)."""


class RemoteError(Exception):
    """The other side's handler raised; `kind` names its exception type."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class ChannelClosed(ConnectionError):
    """The other process went away."""


class Channel:
    """One end of a connection between the supervisor and a frontend process: `call` the
    other side, and answer its calls with `handler`."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()

    async def call(self, op: str, **args: Any) -> Any:
        if self.closed.is_set():
            raise ChannelClosed(op)
        call_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = future
        try:
            await self._send({"id": call_id, "op": op, "args": args})
            return await future
        finally:
            self._waiting.pop(call_id, None)

    async def serve(self) -> None:
        """Read until the other side closes; then every call still waiting fails."""
        try:
            while line := await self._reader.readline():
                message = json.loads(line)
                if "op" in message:
                    task = asyncio.create_task(self._answer(message))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                else:
                    self._resolve(message)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed.set()
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ChannelClosed("the other process went away"))

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()

    def _resolve(self, message: dict[str, Any]) -> None:
        future = self._waiting.get(message["id"])
        if future is None or future.done():
            return
        if "error" in message:
            future.set_exception(RemoteError(message["error"]["kind"], message["error"]["message"]))
        else:
            future.set_result(message.get("result"))

    async def _answer(self, message: dict[str, Any]) -> None:
        try:
            reply = {
                "id": message["id"],
                "result": await self._handler(message["op"], message["args"]),
            }
        except Exception as exc:
            logger.debug("call %s failed", message["op"], exc_info=True)
            reply = {
                "id": message["id"],
                "error": {"kind": type(exc).__name__, "message": str(exc)},
            }
        with contextlib.suppress(ConnectionError):
            await self._send(reply)

    async def _send(self, message: dict[str, Any]) -> None:
        self._writer.write(json.dumps(message).encode() + b"\n")
        await self._writer.drain()
