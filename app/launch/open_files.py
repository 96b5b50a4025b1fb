"""The open files a server needs: one per connection it may hold, HTTP and gRPC, besides a
reserve for its engines' sockets, logs and model files. The soft limit is raised toward the
hard one at start (as `vllm serve` raises it); a limit still too low is logged with the
settings that size it, before a client can run the server out of descriptors."""

from __future__ import annotations

import logging
import resource

from app.settings import Settings

__all__ = ["RESERVED_FILES", "needed_open_files", "raise_open_file_limit"]

logger = logging.getLogger(__name__)

RESERVED_FILES = 256
"""Besides connections: a server process holds some 40 descriptors serving one model."""
TARGET_SOFT_LIMIT = 65535
"""What `vllm serve` raises the soft limit to, where the hard limit allows."""


def needed_open_files(settings: Settings) -> int:
    """The descriptors one frontend process may hold at once."""
    grpc = settings.max_grpc_connections if settings.allow_grpc and settings.grpc_port else 0
    return settings.max_http_connections + grpc + RESERVED_FILES


def raise_open_file_limit(needed: int) -> int:
    """Raise the soft open-file limit to what `vllm serve` sets (at least `needed`), within
    the hard limit; warn when it stays below `needed`. The limit it leaves."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(needed, TARGET_SOFT_LIMIT)
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            logger.debug("could not raise the open-file limit to %d: %s", wanted, exc)
    if soft != resource.RLIM_INFINITY and soft < needed:
        logger.warning(
            "the open-file limit is %d (hard limit %s), below the %d this server may use: "
            "MAX_HTTP_CONNECTIONS and MAX_GRPC_CONNECTIONS, and %d for engines and files. "
            "Raise it (ulimit -n; a container's nofile) or lower those limits",
            soft,
            "unlimited" if hard == resource.RLIM_INFINITY else hard,
            needed,
            RESERVED_FILES,
        )
    return soft
