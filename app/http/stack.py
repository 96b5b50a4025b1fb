"""The HTTP app's middleware stack, outermost first: access log, trace context, CORS, the
cross-site guard, body deadline and size limit, API keys, restricted API groups."""

from __future__ import annotations

from dataclasses import dataclass
from re import Pattern

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app.http.access import CrossSiteGuard, HostNames, RestrictedApiMiddleware
from app.http.access_log import AccessLogMiddleware
from app.http.errors import ErrorBodies
from app.http.middleware import (
    ApiKeyMiddleware,
    BodyDeadlineMiddleware,
    BodySizeLimitMiddleware,
    FrontendProcessHeader,
)
from app.http.trace_context import TraceContextMiddleware
from app.settings import Settings

OPEN_PREFIXES = ["/docs", "/redoc", "/openapi.json", "/static/"]
"""Routes that answer without an API key: the docs, the playground's page and assets."""


@dataclass(frozen=True)
class QueryKey:
    """Where an API key may come in the query string (an `EventSource` cannot send headers)."""

    paths: Pattern[str]
    name: str


def add_middleware(
    app: FastAPI,
    settings: Settings,
    errors: ErrorBodies,
    query_key: QueryKey,
    frontend_process: int | None = None,
) -> None:
    """The stack around `app`'s routes (added last: the routes are what the access and
    cross-site checks look up); `frontend_process` names this process in a header."""
    restrictions = settings.http_restrictions()
    if restrictions.by_group:
        app.add_middleware(
            RestrictedApiMiddleware, restrictions=restrictions, routes=app.routes, errors=errors
        )
    if settings.api_keys:
        add_api_keys(app, settings, errors, query_key)
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=settings.max_request_body_bytes,
        max_bytes_in_flight=settings.max_request_bytes_in_flight,
        errors=errors,
    )
    app.add_middleware(
        BodyDeadlineMiddleware, timeout=settings.http_body_timeout_seconds, errors=errors
    )
    app.add_middleware(
        CrossSiteGuard,
        allowed_origins=settings.cors_allow_origins,
        routes=app.routes,
        hosts=HostNames(settings.allowed_hosts),
        errors=errors,
    )
    if settings.cors_allow_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_allow_origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID"],
        )
    app.add_middleware(TraceContextMiddleware)
    app.add_middleware(AccessLogMiddleware, log_prompts=settings.log_prompts)
    if frontend_process is not None:
        app.add_middleware(FrontendProcessHeader, index=frontend_process)


def add_api_keys(
    app: FastAPI, settings: Settings, errors: ErrorBodies, query_key: QueryKey
) -> None:
    """API keys on every route but the open ones (the docs; health and metrics where the
    settings open them)."""
    open_prefixes = list(OPEN_PREFIXES)
    open_paths = ["/"]
    if settings.auth_open_health:
        open_prefixes.append("/v2/health/")
        open_paths += ["/health", "/ping"]
    if settings.auth_open_metrics:
        open_prefixes.append("/metrics")
    app.add_middleware(
        ApiKeyMiddleware,
        keys=settings.api_keys,
        open_prefixes=open_prefixes,
        open_paths=open_paths,
        query_key_path=query_key.paths,
        query_key_name=query_key.name,
        errors=errors,
    )
