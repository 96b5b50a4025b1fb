"""Triton's command-line value checks, with its messages (src/command_line_parser.cc): each
raises `ValueError` with the text tritonserver prints under `Bad option: "--<flag>".`."""

from __future__ import annotations

import re
from collections.abc import Callable

from app.security.restrictions import GRPC_HEADER_PREFIX, RestrictionSyntaxError, parse_restrictions

INT32 = (-(2**31), 2**31 - 1)
INTEGER = re.compile(r"\s*[+-]?\d+")
FLOAT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def integer(text: str, bounds: tuple[int, int] = INT32) -> int:
    """Triton's std::stoi: an integer in range (a whole-word one: "12abc" is refused here)."""
    if not INTEGER.fullmatch(text):
        raise ValueError(f"Invalid option value. Got {text}")
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"Provided option value is out of bound. Got {text}")
    return value


def floating(text: str) -> float:
    if not FLOAT.fullmatch(text):
        raise ValueError(f"Invalid option value. Got {text}")
    return float(text)


def boolean(text: str) -> bool:
    """true/on/1 or false/off/0, in any case."""
    lowered = text.lower()
    if lowered in ("true", "on", "1"):
        return True
    if lowered in ("false", "off", "0"):
        return False
    raise ValueError(f"invalid value for bool option: {text}")


def int_or_bool(text: str) -> int:
    """--log-verbose: true (1), false (0) or an integer."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    return integer(text)


def log_format(value: str) -> str:
    if value not in ("default", "ISO8601"):
        raise ValueError("invalid argument for --log-format")
    return value


def model_control_mode(value: str) -> str:
    mode = value.lower()
    if mode not in ("none", "poll", "explicit"):
        raise ValueError("invalid argument for --model-control-mode")
    return mode


def grpc_compression_level(value: str) -> str:
    if value.lower() not in ("none", "low", "medium", "high"):
        raise ValueError("invalid argument for --grpc_infer_response_compression_level")
    return value


def grpc_thread_count(value: int) -> int:
    if not 2 <= value <= 128:
        raise ValueError(
            "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128."
        )
    return value


def positive(flag: str) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value <= 0:
            raise ValueError(f"Error: {flag} must be greater than 0.")
        return value

    return check


def http_restriction(value: str) -> str:
    return restriction(value, "http-restricted-api", "")


def grpc_restriction(value: str) -> str:
    return restriction(value, "grpc-restricted-protocol", GRPC_HEADER_PREFIX)


def restriction(value: str, flag: str, prefix: str) -> str:
    try:
        parse_restrictions([value], flag, prefix)
    except RestrictionSyntaxError as exc:
        raise ValueError(str(exc)) from exc
    return value


def backend_config(value: str) -> str:
    """`<backend>,<setting>=<value>` or `<setting>=<value>`."""
    return scoped_setting(value, "backend-config", "backend", "<backend name>")


def cache_config(value: str) -> str:
    """`<cache>,<setting>=<value>` (Triton takes no setting without a cache's name)."""
    name_end = value.find(",")
    if name_end <= 0:
        raise ValueError(
            "No cache specified. --cache-config option format is "
            f"<cache name>,<setting>=<value>. Got {value}"
        )
    if value.find("=", name_end + 1) < 0:
        raise ValueError(
            f"--cache-config option format is '<cache name>,<setting>=<value>'. Got {value}"
        )
    return value


def deprecated_trace(option: str) -> Callable[[object], str]:
    """A deprecated `--trace-<x>` flag's value as the `--trace-config` option it stands for."""

    def convert(value: object) -> str:
        return trace_config(f"{option}={value}")

    return convert


def metrics_config(value: str) -> str:
    """`<setting>=<value>`, no name before a comma."""
    setting_end = value.find("=")
    if (
        setting_end < 0
        or "," in value[:setting_end]
        or not value[:setting_end]
        or not value[setting_end + 1 :]
    ):
        raise ValueError(f"--metrics-config option format is <setting>=<value>. Got {value}")
    return value


def trace_config(value: str) -> str:
    """`<mode>,<setting>=<value>` (mode triton or opentelemetry) or `<setting>=<value>`."""
    return scoped_setting(value, "trace-config", "trace mode", "<trace mode>", trace_mode)


def trace_mode(mode: str) -> None:
    if mode.lower() not in ("triton", "opentelemetry"):
        raise ValueError(
            f"invalid value for trace mode option: {mode}. Available options are "
            '"triton" and "opentelemetry"'
        )


def scoped_setting(
    value: str,
    flag: str,
    scope: str,
    placeholder: str,
    check_scope: Callable[[str], None] | None = None,
) -> str:
    """`<scope>,<setting>=<value>` or `<setting>=<value>` (--backend-config, --trace-config),
    with Triton's messages for a missing scope, setting or value; `check_scope` checks a
    scope's name where one is given."""
    scope_end = value.find(",")
    setting_end = value.find("=", scope_end + 1)
    if scope_end == 0:
        raise ValueError(
            f"No {scope} specified. --{flag} option format is {placeholder},<setting>=<value> "
            f"or <setting>=<value>. Got {value}"
        )
    if scope_end > 0 and check_scope is not None:
        check_scope(value[:scope_end])
    if setting_end < 0 or not value[scope_end + 1 : setting_end] or not value[setting_end + 1 :]:
        raise ValueError(
            f"--{flag} option format is '{placeholder},<setting>=<value>'. Got {value}"
        )
    return value
