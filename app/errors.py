"""The server's exception types: pure Python, no protocol in sight.

Each frontend maps them to its protocol (HTTP status and body in `app/http/errors.py`, gRPC
status codes in the gRPC frontend); the core, the engine adapter and the repository raise
them without knowing who will answer the client.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from app.security.redaction import without_dumps

UNHEALTHY_MESSAGE = "Model is unavailable due to unhealthy vLLM engine"
"""The Triton vLLM backend's text for a request to a model whose engine has failed."""
ENGINE_FAULT_MESSAGE = (
    "The engine failed twice while running this request; it was not resumed again"
)


class ServerError(Exception):
    """An error the client is told about, with a message meant for it. Unclassified: the
    server's fault (HTTP 500)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        self.detail = message
        """The whole text, for the server's log."""
        self.message = without_dumps(message)
        """What the client is told (also `str()`): no validation dump, no stack trace."""
        super().__init__(self.message)
        self.param = param
        """The request field at fault, when the error is about one."""


class InvalidRequestError(ServerError):
    """The client sent something the server cannot accept; the message names the field."""


class PayloadTooLargeError(InvalidRequestError):
    """The request body is larger than the server accepts."""


class UnprocessableContentError(InvalidRequestError):
    """The request is well-formed but what it points to cannot be used (e.g. an image URL
    that cannot be fetched)."""


class NotSupportedError(InvalidRequestError):
    """The request asks for something this server does not implement."""


class UnsupportedMediaTypeError(InvalidRequestError):
    """The request body's content type is not one this route takes."""


class UnauthorizedError(ServerError):
    """The request carries no valid API key."""


class ForbiddenError(ServerError):
    """The request may not use this API: a restricted group without its header, or a
    state-changing request from a web page of another origin."""


class ModelNotFoundError(ServerError):
    """The requested model or version is not served."""


class ModelUnavailableError(ServerError):
    """The model exists but cannot take requests now (starting, unhealthy, draining)."""


class EngineUnhealthyError(ModelUnavailableError):
    """The model's engine has failed or does not answer its health check."""

    def __init__(self, message: str = UNHEALTHY_MESSAGE) -> None:
        super().__init__(message)


class ModelControlDisabledError(ModelUnavailableError):
    """Load and unload requests are refused in this model control mode (as Triton answers)."""

    def __init__(self) -> None:
        super().__init__("explicit model load / unload is not allowed if polling is enabled")


class OverloadedError(ModelUnavailableError):
    """Too many requests are admitted already; the client should retry later."""


class EngineFaultError(ServerError):
    """The engine died twice while running the request: it is not resumed a third time, as
    it may be what kills the engine (a server fault: HTTP 500)."""

    def __init__(self, message: str = ENGINE_FAULT_MESSAGE) -> None:
        super().__init__(message)


class RequestTimeoutError(ServerError):
    """The request ran past the server's per-request time limit and was aborted."""


class ModelLoadError(ServerError):
    """Loading a model from the repository failed."""


class ModelConfigError(Exception):
    """A model repository entry is invalid (start-up, or a load request)."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` with the closest known name, or nothing: for error messages."""
    hint = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean '{hint[0]}'?)" if hint else ""
