"""Pure ASGI middleware guarding who may call what: Triton's restricted API groups, and no
state-changing request from another origin's web page."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import ForbiddenError, ServerError, UnsupportedMediaTypeError
from app.http.api_groups import api_group, changes_state
from app.http.errors import TRITON_ERRORS, ErrorBodies, error_response
from app.http.middleware import header
from app.security.restrictions import Restrictions

SIMPLE_CONTENT_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")
"""The content types a web page may POST to another origin without asking first (CORS
"simple" requests): never taken by a state-changing route."""


class RestrictedApiMiddleware:
    """403 `This API is restricted, expecting header '<header>'` (Triton's answer) for a
    request to a restricted group without the group's header and value."""

    def __init__(
        self, app: ASGIApp, restrictions: Restrictions, errors: ErrorBodies = TRITON_ERRORS
    ) -> None:
        self.app = app
        self.restrictions = restrictions
        self.errors = errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        group = (
            api_group(scope["path"])
            if scope["type"] == "http" and scope["method"] != "OPTIONS"
            else None
        )
        if group is not None:
            headers = {
                key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]
            }
            refusal = self.restrictions.refusal(group, headers)
            if refusal is not None:
                await error_response(ForbiddenError(refusal), scope["path"], self.errors)(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


class CrossSiteGuard:
    """A state-changing request (load, unload, trace and log settings, LoRA adapters) is
    refused when a browser sent it from a page of another origin than the server's own or
    those CORS allows (403), or with a content type a page may send without a CORS
    preflight (415). Clients that are not browsers send no `Origin` and are not affected."""

    def __init__(
        self, app: ASGIApp, allowed_origins: Iterable[str], errors: ErrorBodies = TRITON_ERRORS
    ) -> None:
        self.app = app
        self.allowed_origins = frozenset(
            origin.rstrip("/") for origin in allowed_origins if origin != "*"
        )
        self.errors = errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and changes_state(scope["method"], scope["path"]):
            error = self.refusal(scope)
            if error is not None:
                await error_response(error, scope["path"], self.errors)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> ServerError | None:
        content_type = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if content_type in SIMPLE_CONTENT_TYPES:
            return UnsupportedMediaTypeError(
                f"Content-Type '{content_type}' is not accepted here: send application/json"
            )
        origin = header(scope, b"origin")
        fetch_site = header(scope, b"sec-fetch-site")
        if origin is None:
            if fetch_site == "cross-site":
                return ForbiddenError("cross-site requests may not change the server's state")
            return None
        if origin.rstrip("/") in self.allowed_origins or same_origin(origin, scope):
            return None
        return ForbiddenError(
            f"Origin '{origin[:200]}' may not change the server's state (see CORS_ALLOW_ORIGINS)"
        )


def same_origin(origin: str, scope: Scope) -> bool:
    """Whether `origin` is the server's own, as the request's Host header names it."""
    host = header(scope, b"host")
    if host is None:
        return False
    parts = urlsplit(origin)
    return parts.scheme == scope.get("scheme", "http") and parts.netloc.lower() == host.lower()
