"""Triton's logging extension on every protocol (HTTP `/v2/logging`, gRPC `LogSettings`): the
settings as Triton reports them, and a client's change, applied at once to this process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.errors import InvalidRequestError, NotSupportedError
from app.observability.log_control import LOG_CONTROL, TRITON_FORMATS, LogControl

LOG_FILE_REFUSAL = "log file location can not be updated through network protocol"
"""Triton's answer (501 / UNIMPLEMENTED) to a request that sets `log_file`."""


@dataclass(frozen=True)
class LogSettingsChange:
    """What a request changes; None: left as it is."""

    info: bool | None = None
    warning: bool | None = None
    error: bool | None = None
    verbose: int | None = None
    format: str | None = None


def refuse_log_file() -> None:
    raise NotSupportedError(LOG_FILE_REFUSAL, param="log_file")


def check_log_format(value: str, label: str) -> str:
    """Triton's two formats; `label` names the setting as the protocol's message does."""
    if value not in TRITON_FORMATS:
        raise InvalidRequestError(f"invalid argument for {label}, got: {value}", param="log_format")
    return value


def current_settings(control: LogControl = LOG_CONTROL) -> dict[str, Any]:
    """Every setting, as Triton's response lists them (`log_file`: --log-file, "" for the
    console)."""
    settings = control.settings
    return {
        "log_file": control.file,
        "log_info": settings.info,
        "log_warning": settings.warning,
        "log_error": settings.error,
        "log_verbose_level": settings.verbose,
        "log_format": settings.format,
    }


def apply_change(change: LogSettingsChange, control: LogControl = LOG_CONTROL) -> dict[str, Any]:
    """Apply every setting the change gives (all of them or, on a bad request, none), then
    answer every setting."""
    requested = {
        "info": change.info,
        "warning": change.warning,
        "error": change.error,
        "verbose": change.verbose,
        "format": change.format,
    }
    control.update(**{key: value for key, value in requested.items() if value is not None})
    return current_settings(control)
