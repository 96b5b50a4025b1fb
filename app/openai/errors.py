"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, where `type` is
the status's name as vLLM's server writes it (`BadRequestError`, `NotFoundError`, ...) and
`code` the HTTP status."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from app.errors import ServerError


def error_type(status: int) -> str:
    """`BadRequestError` for 400, `ServiceUnavailableError` for 503, ...: vLLM's names."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return "Error"
    words = "".join(part.capitalize() for part in phrase.replace("-", " ").split())
    return words.removesuffix("Error") + "Error"


def openai_error_body(exc: ServerError, status: int) -> dict[str, Any]:
    return {
        "error": {
            "message": exc.message,
            "type": error_type(status),
            "param": exc.param,
            "code": status,
        }
    }


def error_frame(exc: ServerError, status: int) -> str:
    """The error as an SSE frame, as vLLM's streams report one after their first frame."""
    return f"data: {json.dumps(openai_error_body(exc, status))}\n\n"


def error_event(exc: ServerError, status: int, sequence_number: int) -> str:
    """The error as the Responses API's `error` event (OpenAI's `ResponseErrorEvent`): `code`
    is the status's name, `sequence_number` the event's place in the stream."""
    event = {
        "type": "error",
        "code": error_type(status),
        "message": exc.message,
        "param": exc.param,
        "sequence_number": sequence_number,
    }
    return f"event: error\ndata: {json.dumps(event)}\n\n"
