"""The declaration of the route a request is for: its Triton API group and whether it changes
the server's state, as the route declares them where it is defined (`api_group`)."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app.security.restrictions import ApiAccess, declared_access


def route_handler(route: BaseRoute) -> object:
    """What a route's declaration is on: its endpoint, or a mount's app."""
    endpoint = getattr(route, "endpoint", None)
    return endpoint if endpoint is not None else getattr(route, "app", None)


def route_access(routes: Sequence[BaseRoute], scope: Scope) -> ApiAccess | None:
    """The declaration of the route that serves `scope` (the first matching its path and
    method, else the first matching its path: a path's group whatever the method); None where
    no route matches or the route declares nothing."""
    path_only: BaseRoute | None = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return declared_access(route_handler(route))
        if match is Match.PARTIAL and path_only is None:
            path_only = route
    return None if path_only is None else declared_access(route_handler(path_only))
