"""Helpers of the OpenAI API tests: the engine's own request count, OpenAI error bodies."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.responses import Response

ENGINE_UNFINISHED = "server_engine_requests_unfinished"


def engine_unfinished(base_url: str, headers: dict[str, str] | None = None) -> float:
    """The engine's own count of the requests it holds (summed over the models)."""
    text = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(ENGINE_UNFINISHED + "{")
    )


def openai_error(response: Response, status: int) -> dict[str, Any]:
    """The `error` object of an OpenAI-shaped error response with `status`."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, (
        body
    )
    error: dict[str, Any] = body["error"]
    assert error["code"] == status
    return error
