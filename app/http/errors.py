"""The server's exceptions as HTTP answers: a status per exception type, Triton's body."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import (
    InvalidRequestError,
    ModelLoadError,
    ModelNotFoundError,
    ModelUnavailableError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServerError,
    UnauthorizedError,
)
from app.http.access_log import current_request
from app.schemas.validation import format_validation_errors

STATUS_BY_ERROR: dict[type[ServerError], int] = {
    PayloadTooLargeError: 413,
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


def error_response(exc: ServerError) -> JSONResponse:
    return JSONResponse(error_body(exc.message), status_code=http_status(exc), headers=http_headers(exc))


async def _server_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServerError)
    record = current_request.get()
    if record is not None:
        record.error = exc.message
    return error_response(exc)


async def _validation_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(error_body(format_validation_errors(exc.errors())), status_code=400)


async def _http_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(error_body(str(exc.detail)), status_code=exc.status_code, headers=exc.headers)


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception a client can cause to `{"error": ...}` with its status."""
    app.add_exception_handler(ServerError, _server_error_handler)
    app.add_exception_handler(RequestValidationError, _validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, _http_error_handler)
