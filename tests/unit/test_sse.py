"""`EventStream`: our frames unchanged, and sse-starlette's pings still sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.types import Message

from app.routes.sse import EventStream, data_frame


async def collect(response: EventStream) -> list[bytes]:
    """Run the response as an ASGI app; return the body chunks it sent."""
    bodies: list[bytes] = []
    finished = asyncio.Event()

    async def receive() -> Message:
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message["body"])
            if not message.get("more_body"):
                finished.set()

    scope = {"type": "http", "method": "POST", "headers": []}
    await asyncio.wait_for(response(scope, receive, send), timeout=10)
    return bodies


def test_data_frame_is_one_compact_json_line() -> None:
    frame = data_frame({"text_output": "a\nb é", "n": 1})
    assert frame == 'data: {"text_output":"a\\nb é","n":1}\n\n'.encode()


async def test_frames_pass_unchanged_and_pings_still_flow() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield data_frame({"text_output": "a"})
        await asyncio.sleep(1.3)
        yield data_frame({"text_output": "b"})

    bodies = await collect(EventStream(frames(), sep="\n", ping=1))
    data = [b for b in bodies if b.startswith(b"data:")]
    assert data == [b'data: {"text_output":"a"}\n\n', b'data: {"text_output":"b"}\n\n']
    assert any(b.startswith(b": ping") for b in bodies)
    assert bodies[-1] == b""
