"""What the OpenAI route tests (tests/unit/test_openai_routes*.py) share: the request bodies,
the OpenAI error object of a response checked for its status and shape, and the `data:`
payloads of an SSE body."""

from __future__ import annotations

from typing import Any

from tests.support.responses import Response

COMPLETION = {"model": "fake", "prompt": "Hi", "max_tokens": 3}
CHAT = {"model": "fake", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
JSON = [(b"content-type", b"application/json")]


def error_of(response: Response, status: int) -> dict[str, Any]:
    """The OpenAI error object of a response, checked for its status and shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    assert error["code"] == status and error["message"]
    return error


def frames(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, `[DONE]` included."""
    parts = [part for part in text.split("\n\n") if part]
    assert all(part.startswith("data: ") for part in parts), parts
    return [part.removeprefix("data: ") for part in parts]
