"""The access log as the tests read it (app/observability/access_log.py)."""

from __future__ import annotations

import logging
from typing import Any


def access_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields of an `app.access` record (logged as `extra={"access": fields}`)."""
    fields: dict[str, Any] = record.__dict__["access"]
    return fields
