"""The HTTP response the shared helpers read: httpx's (clients of real servers) or httpx2's
(Starlette's TestClient), two packages with one surface."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Response(Protocol):
    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def json(self, **kwargs: Any) -> Any: ...
