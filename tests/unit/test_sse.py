"""`EventStream`: our frames unchanged, sse-starlette's pings still sent (none when off), and
the frame iterator closed however the response ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from starlette.types import Message

from app.http.sse import EventStream
from app.routes.sse import data_frame


async def collect(
    response: EventStream, method: str = "POST", disconnect_after: float | None = None
) -> list[Message]:
    """Run the response as an ASGI app; return the messages it sent. The client leaves once
    the body has ended, or after `disconnect_after` seconds."""
    sent: list[Message] = []
    finished = asyncio.Event()

    async def receive() -> Message:
        if disconnect_after is None:
            await finished.wait()
        else:
            await asyncio.sleep(disconnect_after)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            finished.set()

    scope = {"type": "http", "method": method, "headers": []}
    await asyncio.wait_for(response(scope, receive, send), timeout=10)
    return sent


def bodies(sent: list[Message]) -> list[bytes]:
    return [m["body"] for m in sent if m["type"] == "http.response.body"]


def test_data_frame_is_one_compact_json_line() -> None:
    frame = data_frame({"text_output": "a\nb é", "n": 1})
    assert frame == 'data: {"text_output":"a\\nb é","n":1}\n\n'.encode()


async def test_frames_pass_unchanged_and_pings_still_flow() -> None:
    async def frames() -> AsyncGenerator[bytes, None]:
        yield data_frame({"text_output": "a"})
        await asyncio.sleep(1.3)
        yield data_frame({"text_output": "b"})

    sent = bodies(await collect(EventStream(frames(), ping_seconds=1)))
    data = [b for b in sent if b.startswith(b"data:")]
    assert data == [b'data: {"text_output":"a"}\n\n', b'data: {"text_output":"b"}\n\n']
    assert any(b.startswith(b": ping") for b in sent)
    assert sent[-1] == b""


async def test_without_pings_the_body_is_the_frames_alone() -> None:
    """The OpenAI streams' bytes: each frame as the serving code wrote it, nothing between."""
    frames = [b'data: {"id": "x"}\n\n', b"event: response.done\ndata: {}\n\n", b"data: [DONE]\n\n"]

    async def slow_frames() -> AsyncGenerator[bytes, None]:
        for frame in frames:
            await asyncio.sleep(0.05)
            yield frame

    sent = await collect(EventStream(slow_frames()))
    assert bodies(sent) == [*frames, b""]
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"


async def test_a_client_gone_mid_stream_closes_the_frames_at_once() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncGenerator[bytes, None]:
        try:
            while True:
                yield b"data: {}\n\n"
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    sent = await collect(EventStream(endless()), disconnect_after=0.1)
    assert closed.is_set()
    assert b"data: {}\n\n" in bodies(sent)


async def test_a_head_request_closes_the_frames_it_never_sends() -> None:
    closed = asyncio.Event()

    async def frames() -> AsyncGenerator[bytes, None]:
        try:
            yield b"data: {}\n\n"
        finally:
            closed.set()

    stream = frames()
    await anext(stream)
    sent = await collect(EventStream(stream), method="HEAD")
    assert bodies(sent) == [b""] and closed.is_set()
