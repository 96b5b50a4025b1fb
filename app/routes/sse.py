"""The Server-Sent Events response of `generate_stream`."""

from __future__ import annotations

from sse_starlette import EventSourceResponse
from starlette.types import Message, Send


class EventStream(EventSourceResponse):
    """sse-starlette's response without a cancel scope around each send when there is no
    send timeout (our case).

    `anyio.move_on_after(None)` per event was the largest single cost of our per-token path
    in the micro-benchmark (bench/micro.py); with no deadline it can never fire, so skipping it
    changes nothing else. Pings, disconnect handling and shutdown are sse-starlette's.
    """

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is None:
            await send(message)
            return
        await super()._send_with_timeout(send, message)
