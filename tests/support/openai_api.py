"""Helpers of the OpenAI API tests: the engine's own request count, OpenAI error bodies, the
Optional parts of the SDK's answers checked present."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
from openai.types import Completion, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel

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


def wait_engine_idle(base_url: str, timeout: float = 10) -> bool:
    """Until the engine holds no request (True), or `timeout` seconds (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine_unfinished(base_url) == 0:
            return True
        time.sleep(0.1)
    return False


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


def usage_of(result: Completion | ChatCompletion | ChatCompletionChunk) -> CompletionUsage:
    assert result.usage is not None, "no usage"
    return result.usage


def extra_of(model: BaseModel) -> dict[str, Any]:
    """The fields of an SDK object beyond those the SDK declares (vLLM's own)."""
    assert model.model_extra is not None
    return model.model_extra


def body_of(error: openai.APIStatusError) -> dict[str, Any]:
    """The JSON body of the SDK's error."""
    assert isinstance(error.body, dict), error.body
    return error.body
