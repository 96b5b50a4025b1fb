"""Triton's restricted API groups (`--http-restricted-api`, `--grpc-restricted-protocol`):
a group of APIs answers only requests that carry a given header with a given value. Each
HTTP route and gRPC method declares its group where it is defined (`api_group`)."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
"""Triton's prefix of the gRPC metadata key a restricted protocol group expects."""


class ApiGroup(str, Enum):
    """Triton's restricted categories, by the names its flags take."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


Handler = TypeVar("Handler")
ACCESS_ATTRIBUTE = "_api_access"
"""The attribute of a route's endpoint (or an RPC's method) holding its `ApiAccess`."""


@dataclass(frozen=True)
class ApiAccess:
    """What a route or RPC declares: its group (None: in no group, as the docs, the
    playground and /metrics) and whether a POST to it changes what the server serves or how it
    records (load, unload, trace and log settings, LoRA adapters)."""

    group: ApiGroup | None
    changes_state: bool = False


def api_group(group: ApiGroup | None, changes_state: bool = False) -> Callable[[Handler], Handler]:
    """Declare the group of the route endpoint, mounted app or RPC method it decorates
    (it is returned as it is, so the decorator may stand above or below the route's)."""
    access = ApiAccess(group, changes_state)

    def declare(handler: Handler) -> Handler:
        setattr(handler, ACCESS_ATTRIBUTE, access)
        return handler

    return declare


def declared_access(handler: object) -> ApiAccess | None:
    """A handler's declaration; None for one that declares nothing."""
    access = getattr(handler, ACCESS_ATTRIBUTE, None)
    return access if isinstance(access, ApiAccess) else None


class RestrictionSyntaxError(ValueError):
    """A restriction option that Triton's parser refuses, with Triton's message."""


@dataclass(frozen=True)
class Restriction:
    """The header (lower case) and value that every request to a group must carry."""

    header: str
    value: str

    def allows(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode(), self.value.encode()
        )


@dataclass(frozen=True)
class Restrictions:
    """Restricted group -> its restriction; a group not in `by_group` is open."""

    by_group: Mapping[ApiGroup, Restriction]

    def refusal(
        self, group: ApiGroup, headers: Mapping[str, str], protocol: bool = False
    ) -> str | None:
        """None if a request to `group` with these (lower-case) headers may proceed, else
        Triton's message for the refusal (HTTP: "API", gRPC: "protocol")."""
        restriction = self.by_group.get(group)
        if restriction is None or restriction.allows(headers.get(restriction.header)):
            return None
        kind = "protocol" if protocol else "API"
        return f"This {kind} is restricted, expecting header '{restriction.header}'"


NO_RESTRICTIONS = Restrictions({})


def parse_restrictions(options: Iterable[str], flag: str, header_prefix: str = "") -> Restrictions:
    """Parse `<group>,<group>...:<key>=<value>` options as Triton does, with its messages;
    `header_prefix` is prepended to each key (gRPC: `triton-grpc-protocol-`)."""
    kind = "protocol" if header_prefix else "api"
    by_group: dict[ApiGroup, Restriction] = {}
    for option in options:
        groups, key, value = split_option(option, flag)
        for name in (part for part in groups.split(",") if part):
            try:
                group = ApiGroup(name)
            except ValueError:
                raise RestrictionSyntaxError(f"unknown restricted {kind} '{name}'") from None
            if group in by_group:
                raise RestrictionSyntaxError(
                    f"restricted {kind} '{name}' can not be specified in multiple config groups"
                )
            by_group[group] = Restriction(header=(header_prefix + key).lower(), value=value)
    return Restrictions(by_group)


def split_option(option: str, flag: str) -> tuple[str, str, str]:
    """`a,b:key=value` -> ("a,b", "key", "value"), or Triton's format error."""
    groups, colon, setting = option.partition(":")
    key, equals, value = setting.partition("=")
    if not (colon and equals and groups and key and value):
        raise RestrictionSyntaxError(
            f"--{flag} option format is '<config name>:<setting>=<value>'. Got {option}"
        )
    return groups, key, value
