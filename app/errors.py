"""The few exception types of the server and their mapping to Triton's error JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException


UNHEALTHY_MESSAGE = "Model is unavailable due to unhealthy vLLM engine"


class ServerError(Exception):
    """An error answered as `{"error": message}` with `status_code`."""

    status_code = 500
    headers: dict[str, str] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequestError(ServerError):
    """The client sent something the server cannot accept."""

    status_code = 400


class ModelNotFoundError(ServerError):
    """The requested model or version is not served."""

    status_code = 404


class ModelUnavailableError(ServerError):
    """The model exists but cannot take requests now (starting, unhealthy, draining)."""

    status_code = 503


class OverloadedError(ModelUnavailableError):
    """Too many requests are admitted already; the client should retry later."""

    headers = {"Retry-After": "1"}


class RequestTimeoutError(ServerError):
    """The request ran past the server's per-request time limit and was aborted."""

    status_code = 504


class UnauthorizedError(ServerError):
    status_code = 401
    headers = {"WWW-Authenticate": "Bearer"}


class ModelLoadError(ServerError):
    """Loading a model from the repository failed (Triton answers these with 400)."""

    status_code = 400


class ModelConfigError(Exception):
    """A model repository entry is invalid; raised at start-up, never for a request."""


def error_body(message: str) -> dict[str, str]:
    """The JSON body Triton sends for every error."""
    return {"error": message}


def format_validation_errors(errors: Sequence[Any], drop_prefix: str = "body") -> str:
    """One readable line per pydantic error, each naming the field it is about."""
    lines = []
    for error in errors:
        location = [str(part) for part in error.get("loc", ()) if part != drop_prefix]
        field = ".".join(location) or "body"
        lines.append(f"{field}: {error.get('msg', 'invalid value')}")
    return "; ".join(lines)


async def _server_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServerError)
    return error_response(exc)


def error_response(exc: ServerError) -> JSONResponse:
    return JSONResponse(error_body(exc.message), status_code=exc.status_code, headers=exc.headers)


async def _validation_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, (RequestValidationError, ValidationError))
    return JSONResponse(error_body(format_validation_errors(exc.errors())), status_code=400)


async def _http_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(
        error_body(str(exc.detail)), status_code=exc.status_code, headers=exc.headers
    )


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception a client can cause to `{"error": ...}` with its status."""
    app.add_exception_handler(ServerError, _server_error_handler)
    app.add_exception_handler(RequestValidationError, _validation_error_handler)
    app.add_exception_handler(ValidationError, _validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, _http_error_handler)
