"""The server's pure exceptions as gRPC status codes (Triton's mapping of its error codes)."""

from __future__ import annotations

import grpc

from app import errors
from app.errors import ServerError

CODE_BY_ERROR: dict[type[ServerError], grpc.StatusCode] = {
    errors.PayloadTooLargeError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.InvalidRequestError: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotSupportedError: grpc.StatusCode.UNIMPLEMENTED,
    errors.UnauthorizedError: grpc.StatusCode.UNAUTHENTICATED,
    errors.ForbiddenError: grpc.StatusCode.UNAVAILABLE,
    errors.ModelNotFoundError: grpc.StatusCode.NOT_FOUND,
    errors.OverloadedError: grpc.StatusCode.UNAVAILABLE,
    errors.ModelUnavailableError: grpc.StatusCode.UNAVAILABLE,
    errors.RequestTimeoutError: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.ModelLoadError: grpc.StatusCode.INVALID_ARGUMENT,
}
"""Looked up along the exception's class hierarchy, most specific first; otherwise INTERNAL.
Overload is UNAVAILABLE (HTTP's 503): the code gRPC clients and proxies retry."""

SHUTTING_DOWN_MESSAGE = "GRPC server is shutting down and has stopped accepting new requests."
DECOUPLED_INFER_MESSAGE = "ModelInfer RPC doesn't support models with decoupled transaction policy"


def status_code(exc: ServerError) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        if cls in CODE_BY_ERROR:
            return CODE_BY_ERROR[cls]
    return grpc.StatusCode.INTERNAL
