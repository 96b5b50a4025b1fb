"""The server's exceptions as HTTP answers: a status per exception type, and a JSON body
whose shape depends on the API the path belongs to (Triton's `{"error": "..."}` by default)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app.errors import (
    ForbiddenError,
    InvalidRequestError,
    ModelLoadError,
    ModelNotFoundError,
    ModelUnavailableError,
    NotSupportedError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServerError,
    UnauthorizedError,
    UnprocessableContentError,
    UnsupportedMediaTypeError,
)
from app.http.access_log import current_request
from app.http.disconnect import CLIENT_CLOSED_REQUEST
from app.schemas.validation import format_validation_errors

STATUS_BY_ERROR: dict[type[ServerError], int] = {
    PayloadTooLargeError: 413,
    UnsupportedMediaTypeError: 415,
    ForbiddenError: 403,
    UnprocessableContentError: 422,
    NotSupportedError: 501,
    InvalidRequestError: 400,
    UnauthorizedError: 401,
    ModelNotFoundError: 404,
    ModelUnavailableError: 503,
    RequestTimeoutError: 504,
    ModelLoadError: 400,
}
"""Looked up along the exception's class hierarchy, most specific first; otherwise 500."""

HEADERS_BY_ERROR: dict[type[ServerError], dict[str, str]] = {
    OverloadedError: {"Retry-After": "1"},
    UnauthorizedError: {"WWW-Authenticate": "Bearer"},
}

ErrorBody = Callable[[ServerError, int], Any]
"""The JSON body of an error answered with a given status."""


def http_status(exc: ServerError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 500


def http_headers(exc: ServerError) -> dict[str, str] | None:
    for cls in type(exc).__mro__:
        if cls in HEADERS_BY_ERROR:
            return HEADERS_BY_ERROR[cls]
    return None


def error_body(message: str) -> dict[str, str]:
    """The JSON body Triton sends for every error."""
    return {"error": message}


def triton_error_body(exc: ServerError, status: int) -> dict[str, str]:
    return error_body(exc.message)


class ErrorBodies:
    """Which body shape an error gets, by the longest matching path prefix; Triton's for
    every other path."""

    def __init__(self, default: ErrorBody = triton_error_body) -> None:
        self._default = default
        self._by_prefix: list[tuple[str, ErrorBody]] = []

    def add(self, prefix: str, body: ErrorBody) -> None:
        self._by_prefix.append((prefix, body))
        self._by_prefix.sort(key=lambda entry: len(entry[0]), reverse=True)

    def for_path(self, path: str) -> ErrorBody:
        return next(
            (body for prefix, body in self._by_prefix if path.startswith(prefix)), self._default
        )


TRITON_ERRORS = ErrorBodies()


def error_response(
    exc: ServerError,
    path: str = "",
    bodies: ErrorBodies = TRITON_ERRORS,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """`exc` answered with its status (or `status`) in the shape of the API `path` is under."""
    status = status or http_status(exc)
    body = bodies.for_path(path)(exc, status)
    return JSONResponse(body, status_code=status, headers=headers or http_headers(exc))


def install_error_handlers(app: FastAPI, bodies: ErrorBodies = TRITON_ERRORS) -> None:
    """Map every exception a client can cause to an error body with its status."""

    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ServerError)
        record = current_request.get()
        if record is not None:
            record.error = exc.detail
        return error_response(exc, request.url.path, bodies)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        error = InvalidRequestError(format_validation_errors(exc.errors()))
        return error_response(error, request.url.path, bodies)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        error = ServerError(str(exc.detail))
        return error_response(error, request.url.path, bodies, exc.status_code, exc.headers)

    async def client_left(request: Request, exc: Exception) -> Response:
        """The client left while its body was read: the access log's line (499) says so; no
        traceback."""
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    app.add_exception_handler(ServerError, server_error)
    app.add_exception_handler(ClientDisconnect, client_left)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
