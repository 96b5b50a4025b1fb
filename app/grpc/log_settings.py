"""Triton's logging extension over gRPC (`LogSettings`): the request's typed settings read with
Triton's rules and messages, the answer with every setting."""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import service_pb2

from app.errors import InvalidRequestError
from app.runtime import ProcessGroup
from app.triton.logging_settings import (
    LogSettingsChange,
    apply_change,
    check_log_format,
    refuse_log_file,
)

EXPECTED = {"bool_param": "boolean", "uint32_param": "int32", "string_param": "string"}
"""Triton's words for each parameter kind in its 'expect <kind> for ...' message."""


async def log_settings(
    request: service_pb2.LogSettingsRequest, group: ProcessGroup | None
) -> service_pb2.LogSettingsResponse:
    """Apply the request's settings (a `log_file` one is refused) in this process and every
    other of the `group`, and answer them all."""
    settings = apply_change(settings_change(request.settings))
    if group is not None:
        await group.share_log_settings()
    return settings_response(settings)


def settings_change(settings: Any) -> LogSettingsChange:
    if "log_file" in settings:
        refuse_log_file()
    log_format = value_of(settings, "log_format", "string_param")
    return LogSettingsChange(
        info=value_of(settings, "log_info", "bool_param"),
        warning=value_of(settings, "log_warning", "bool_param"),
        error=value_of(settings, "log_error", "bool_param"),
        verbose=value_of(settings, "log_verbose_level", "uint32_param"),
        format=None if log_format is None else check_log_format(log_format, "log_format"),
    )


def value_of(settings: Any, name: str, kind: str) -> Any:
    """The setting's value if given; INVALID_ARGUMENT when it is of another kind."""
    if name not in settings:
        return None
    value = settings[name]
    if value.WhichOneof("parameter_choice") != kind:
        raise InvalidRequestError(f"expect {EXPECTED[kind]} for '{name}'", param=name)
    return getattr(value, kind)


def parameter_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool_param"
    return "uint32_param" if isinstance(value, int) else "string_param"


def settings_response(settings: dict[str, Any]) -> service_pb2.LogSettingsResponse:
    response = service_pb2.LogSettingsResponse()
    for name, value in settings.items():
        setattr(response.settings[name], parameter_kind(value), value)
    return response
