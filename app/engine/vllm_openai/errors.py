"""vLLM's OpenAI errors as the server's own exceptions (each frontend answers them)."""

from __future__ import annotations

import logging
from typing import Any

from app.engine.vllm_openai.compat import create_error_response
from app.errors import (
    InvalidRequestError,
    ModelNotFoundError,
    NotSupportedError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServerError,
    UnprocessableContentError,
)

__all__ = ["as_server_error", "raised_by_vllm"]

logger = logging.getLogger(__name__)

ERROR_BY_STATUS: dict[int, type[ServerError]] = {
    400: InvalidRequestError,
    404: ModelNotFoundError,
    413: PayloadTooLargeError,
    422: UnprocessableContentError,
    501: NotSupportedError,
    503: OverloadedError,
    504: RequestTimeoutError,
}


def as_server_error(response: Any, cause: BaseException | None = None) -> ServerError:
    """vLLM's `ErrorResponse` as the server's exception of the same status; a server error
    with its `cause` is logged (the client gets vLLM's message only)."""
    error = response.error
    status = int(error.code)
    if status >= 500 and cause is not None:
        logger.error("vLLM's serving code failed: %s", cause, exc_info=cause)
    default = InvalidRequestError if 400 <= status < 500 else ServerError
    return ERROR_BY_STATUS.get(status, default)(error.message, param=error.param)


def raised_by_vllm(exc: Exception) -> ServerError:
    """An exception vLLM's serving code raised instead of returning it, as vLLM's server
    answers it: its validation errors (a request it cannot render) a 400, the rest a 500."""
    return as_server_error(create_error_response(exc), exc)
