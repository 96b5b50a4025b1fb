"""Pure ASGI middleware guarding who may call what: Triton's restricted API groups, no
browser request to a name that is not the server's (DNS rebinding), and no state-changing
request from another origin's web page."""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import ForbiddenError, ServerError, UnsupportedMediaTypeError
from app.http.api_groups import route_access
from app.http.errors import TRITON_ERRORS, ErrorBodies, error_response
from app.http.middleware import header
from app.security.restrictions import Restrictions

SIMPLE_CONTENT_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")
"""The content types a web page may POST to another origin without asking first (CORS
"simple" requests): never taken by a state-changing route."""


class RestrictedApiMiddleware:
    """403 `This API is restricted, expecting header '<header>'` (Triton's answer) for a
    request to a restricted group (the one its route declares, among `routes`) without the
    group's header and value."""

    def __init__(
        self,
        app: ASGIApp,
        restrictions: Restrictions,
        routes: Sequence[BaseRoute],
        errors: ErrorBodies = TRITON_ERRORS,
    ) -> None:
        self.app = app
        self.restrictions = restrictions
        self.routes = routes
        self.errors = errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        access = (
            route_access(self.routes, scope)
            if scope["type"] == "http" and scope["method"] != "OPTIONS"
            else None
        )
        group = access.group if access is not None else None
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


class HostNames:
    """The names a browser may reach this server by: any IP address (a page cannot take an
    address's origin, so DNS rebinding needs a name), localhost and its subdomains, the host's
    own name, and the configured ones ('.example.com': it and its subdomains; '*': any)."""

    def __init__(self, configured: Iterable[str] = (), own: Iterable[str] | None = None) -> None:
        names = {name.strip().lower().rstrip(".") for name in configured if name.strip()}
        self.any = "*" in names
        own_names = host_own_names() if own is None else own
        self.exact = frozenset({"localhost", *own_names, *names})
        self.suffixes = (".localhost", *(name for name in names if name.startswith(".")))

    def allows(self, host_header: str) -> bool:
        """Whether a request's Host header names this server."""
        host = host_name(host_header)
        if self.any or host in self.exact or is_address(host):
            return True
        return any(host.endswith(suffix) or host == suffix[1:] for suffix in self.suffixes)


@functools.cache
def host_own_names() -> frozenset[str]:
    """This machine's name and fully qualified name."""
    names = {socket.gethostname(), socket.getfqdn()}
    return frozenset(name.lower().rstrip(".") for name in names if name)


def host_name(host_header: str) -> str:
    """The name or address of a Host header, without its port or an IPv6 address's
    brackets, in lower case."""
    return (urlsplit("//" + host_header.strip()).hostname or "").rstrip(".")


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def from_browser(scope: Scope) -> bool:
    """Whether a browser sent the request: it has an Origin or fetch metadata, or a
    browser's User-Agent (every browser's starts `Mozilla/`; curl's, SDKs', probes' do not)."""
    if header(scope, b"origin") is not None or header(scope, b"sec-fetch-site") is not None:
        return True
    return (header(scope, b"user-agent") or "").startswith("Mozilla/")


class CrossSiteGuard:
    """A browser's request to a Host that is not one of the server's names is refused (403)
    unless its origin is one CORS allows: a page of a name rebound to the server's address
    (DNS rebinding) cannot use it. A state-changing request (load, unload, trace and log
    settings, LoRA adapters) is refused when a browser sent it from a page of another origin
    than the server's own or those CORS allows (403), or with a content type a page may send
    without a CORS preflight (415). Clients that are not browsers are not affected. A route
    among `routes` is state-changing where it declares so (`api_group`)."""

    def __init__(
        self,
        app: ASGIApp,
        allowed_origins: Iterable[str],
        routes: Sequence[BaseRoute],
        hosts: HostNames | None = None,
        errors: ErrorBodies = TRITON_ERRORS,
    ) -> None:
        self.app = app
        self.routes = routes
        self.allowed_origins = frozenset(
            origin.rstrip("/") for origin in allowed_origins if origin != "*"
        )
        self.hosts = hosts or HostNames()
        self.errors = errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = self.host_refusal(scope)
            if error is None and self.changes_state(scope):
                error = self.refusal(scope)
            if error is not None:
                await error_response(error, scope["path"], self.errors)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def changes_state(self, scope: Scope) -> bool:
        if scope["method"] != "POST":
            return False
        access = route_access(self.routes, scope)
        return access is not None and access.changes_state

    def host_refusal(self, scope: Scope) -> ServerError | None:
        """A browser's request to a name that is not the server's, from a page CORS does not
        allow."""
        host = header(scope, b"host")
        if host is None or not from_browser(scope) or self.hosts.allows(host):
            return None
        origin = header(scope, b"origin")
        if origin is not None and origin.rstrip("/") in self.allowed_origins:
            return None
        return ForbiddenError(
            f"Host '{host[:200]}' is not a name of this server: a browser may reach it by "
            "its address, localhost, its host name or a name in ALLOWED_HOSTS"
        )

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
    """Whether `origin` is the server's own, as the request's Host header names it (a name
    the guard has checked is the server's)."""
    host = header(scope, b"host")
    if host is None:
        return False
    parts = urlsplit(origin)
    return parts.scheme == scope.get("scheme", "http") and parts.netloc.lower() == host.lower()
