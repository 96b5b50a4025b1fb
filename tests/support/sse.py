"""Server-Sent Events as clients read them: strict Triton frames, named events, live reads."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx

from tests.support.responses import Response

GENERATE_STREAM = "/v2/models/smollm2/generate_stream"


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


class StreamReader(threading.Thread):
    """One POST stream read on a thread as it arrives: its status and `data:` events; sets
    `first_event` on the first and records when each event arrived (`arrivals`) and when the
    stream ended (`ended_at`)."""

    def __init__(
        self,
        base_url: str,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
        path: str = GENERATE_STREAM,
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.body, self.headers = base_url + path, body, headers or {}
        self.status = 0
        self.events: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.first_event = threading.Event()
        self.ended_at = 0.0

    def run(self) -> None:
        try:
            with httpx.stream(
                "POST", self.url, json=self.body, headers=self.headers, timeout=300
            ) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(json.loads(line.removeprefix("data: ")))
                        self.arrivals.append(time.monotonic())
                        self.first_event.set()
        finally:
            self.ended_at = time.monotonic()
