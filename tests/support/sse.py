"""Server-Sent Events as clients read them: strict Triton frames, named events, live reads."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.support.responses import Response


def named_frames(text: str) -> list[tuple[str, str]]:
    """(event name, data) of every frame, as an EventSource dispatches them (comments skipped)."""
    events = []
    for frame in text.split("\n\n"):
        lines = [line for line in frame.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name, data = "message", []
        for line in lines:
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            else:
                assert field == "data", frame
                data.append(value)
        events.append((name, "\n".join(data)))
    return events


def sse_events(response: Response) -> list[dict[str, Any]]:
    """Parse `data:` frames strictly as Triton writes them: `data: {json}\\n\\n`."""
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in response.text.split("\n\n") if f.strip() and not f.startswith(":")]
    assert all(f.startswith("data: ") and "\n" not in f for f in frames), frames
    return [json.loads(f.removeprefix("data: ")) for f in frames]


def named_events(response: Response) -> list[tuple[str, dict[str, Any]]]:
    """(event name, JSON data) of every frame, as an EventSource dispatches them."""
    assert response.headers["content-type"].startswith("text/event-stream")
    return [(name, json.loads(data)) for name, data in named_frames(response.text)]


def stream_events(
    http: httpx.Client, path: str, body: dict[str, Any]
) -> list[tuple[float, dict[str, Any]]]:
    """(arrival time, event) for every `data:` frame of a POST stream, read as it arrives."""
    events: list[tuple[float, dict[str, Any]]] = []
    with http.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events.extend(
            (time.monotonic(), json.loads(line.removeprefix("data: ")))
            for line in response.iter_lines()
            if line.startswith("data: ")
        )
    return events
