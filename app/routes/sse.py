"""Server-Sent Events of `generate_stream`: the frames it sends (the response is
`app.http.sse.EventStream`)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from app.errors import ServerError
from app.http.errors import error_body
from app.http.sse import EventStream
from app.security.redaction import without_dumps

logger = logging.getLogger(__name__)

JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def data_frame(payload: dict[str, Any]) -> bytes:
    """One SSE event, `data: {json}\n\n`, as bytes sse-starlette sends unchanged.

    Compact JSON escapes every line break, so the payload is always one `data:` line. Built
    here once per event with a shared encoder: cheaper than `json.dumps` with options plus
    sse-starlette's generic `ServerSentEvent` formatting of a dict, on the per-token path.
    """
    return b"data: " + JSON_ENCODER.encode(payload).encode() + b"\n\n"


def named_frame(event: str, payload: dict[str, Any]) -> bytes:
    """One SSE event with a name, `event: <name>\ndata: {json}\n\n`."""
    return b"event: " + event.encode() + b"\n" + data_frame(payload)


def error_event(payload: dict[str, Any]) -> bytes:
    return named_frame("error", payload)


@dataclass(frozen=True, slots=True)
class Framing:
    """How a stream reports an error after its first event, and how it says it is done."""

    error: Callable[[dict[str, Any]], bytes]
    end: bytes = b""


TRITON_FRAMING = Framing(error=data_frame)
"""Triton's `generate_stream`: `data:` frames only; the stream just ends."""

EVENT_SOURCE_FRAMING = Framing(error=error_event, end=named_frame("end", {}))
"""For browsers' `EventSource`: a named `end` event (close, do not reconnect) and `error` event."""


async def sse_frames(
    first: dict[str, Any] | None, events: AsyncGenerator[dict[str, Any], None], framing: Framing
) -> AsyncGenerator[bytes, None]:
    """`data:` frames of compact JSON (`first`, if given, then `events`); an error once the
    stream has started becomes an error frame."""
    try:
        if first is not None:
            yield data_frame(first)
        async for event in events:
            yield data_frame(event)
        if framing.end:
            yield framing.end
    except ServerError as exc:
        yield framing.error(error_body(exc.message))
    except Exception as exc:
        logger.exception("stream failed after it started")
        yield framing.error(error_body(without_dumps(f"Error generating stream: {exc}")))
    finally:
        await events.aclose()


async def single_frame(frame: bytes) -> AsyncGenerator[bytes, None]:
    yield frame


def error_event_stream(exc: ServerError) -> EventStream:
    """A 200 stream holding one `event: error` with Triton's `{"error": ...}`: what an
    `EventSource` can read (it cannot read the body of a 4xx/5xx answer)."""
    return EventStream(single_frame(error_event(error_body(exc.message))))
