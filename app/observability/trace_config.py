"""Triton's `--trace-config` options (src/command_line_parser.cc): the global `rate`, `level`,
`count` and `mode`, and the mode's own settings (`opentelemetry,url=...`, `resource=k=v`,
`bsp_*`), checked at start-up with Triton's messages."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

TRITON_MODE = "triton"
OPENTELEMETRY_MODE = "opentelemetry"
MODES = (TRITON_MODE, OPENTELEMETRY_MODE)
TIMESTAMPS = "TIMESTAMPS"
TENSORS = "TENSORS"
LEVEL_WORDS = {
    "false": None,
    "off": None,
    "true": TIMESTAMPS,
    "on": TIMESTAMPS,
    "min": TIMESTAMPS,
    "max": TIMESTAMPS,
    "timestamps": TIMESTAMPS,
    "tensors": TENSORS,
}
"""Triton's words for a trace level at start-up (None: OFF, which wins over any other)."""
DEFAULT_URL = "http://localhost:4318/v1/traces"
DEFAULT_SERVICE_NAME = "triton-inference-server"
BSP_SETTINGS = {
    "bsp_max_queue_size": ("OTEL_BSP_MAX_QUEUE_SIZE", 2048),
    "bsp_schedule_delay": ("OTEL_BSP_SCHEDULE_DELAY", 5000),
    "bsp_max_export_batch_size": ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
}
"""The batch span processor's settings: their environment variable and default."""
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
FILE_REFUSAL = (
    "Triton's trace files (--trace-config triton,file=...) are not written by this server: "
    "use --trace-config mode=opentelemetry with opentelemetry,url=<OTLP/HTTP endpoint>"
)


@dataclass(frozen=True)
class TraceConfig:
    """The trace settings the server starts with."""

    level: frozenset[str] = frozenset()
    """TIMESTAMPS and/or TENSORS; empty: OFF."""
    rate: int = 1000
    count: int = -1
    mode: str = TRITON_MODE
    file: str = ""
    log_frequency: int = 0
    options: tuple[tuple[str, str], ...] = ()
    """The mode's own settings as the trace extension reports them (`url`, `resource`, `bsp_*`)."""
    unknown: tuple[str, ...] = field(default=())
    """Settings Triton ignores too (the server logs them)."""

    def option(self, name: str, default: str | None = None) -> str | None:
        """The last value of one of the mode's settings."""
        values = [value for key, value in self.options if key == name]
        return values[-1] if values else default

    @property
    def url(self) -> str:
        return self.option("url") or DEFAULT_URL

    def resource(self) -> dict[str, str]:
        """The resource attributes given as `resource=<key>=<value>` (the last of a key wins)."""
        attributes = {}
        for key, value in self.options:
            if key == "resource":
                name, _, attribute = value.partition("=")
                attributes[name] = attribute
        return attributes

    def bsp(self, name: str) -> int:
        return int(self.option(name) or BSP_SETTINGS[name][1])


def parse_trace_config(options: Iterable[str]) -> TraceConfig:
    """Every `[<mode>,]<setting>=<value>` option, read as Triton reads them; a `ValueError`
    with Triton's message (or ours, for what this server does not do) otherwise."""
    by_mode: dict[str, list[tuple[str, str]]] = {"": [], TRITON_MODE: [], OPENTELEMETRY_MODE: []}
    for option in options:
        mode, setting, value = split_option(option)
        by_mode[mode].append((setting, value))
    values, unknown = global_settings(by_mode[""])
    mode = str(values.get("mode", TRITON_MODE))
    if mode == OPENTELEMETRY_MODE:
        options_of_mode = opentelemetry_options(by_mode[OPENTELEMETRY_MODE])
    else:
        options_of_mode = triton_options(by_mode[TRITON_MODE], values)
    config = TraceConfig(options=options_of_mode, unknown=tuple(unknown))
    return replace(config, **values)  # type: ignore[arg-type]


def split_option(option: str) -> tuple[str, str, str]:
    """(mode or '' for a global setting, setting, value), with Triton's format messages."""
    mode_end = option.find(",")
    setting_end = option.find("=", mode_end + 1)
    mode = ""
    if mode_end == 0:
        raise ValueError(
            "No trace mode specified. --trace-config option format is "
            "<trace mode>,<setting>=<value> "
            f"or <setting>=<value>. Got {option}"
        )
    if mode_end > 0:
        mode = trace_mode(option[:mode_end])
    setting, value = option[mode_end + 1 : setting_end], option[setting_end + 1 :]
    if setting_end < 0 or not setting or not value:
        raise ValueError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {option}"
        )
    return mode, setting, value


def trace_mode(value: str) -> str:
    if value.lower() not in MODES:
        raise ValueError(
            f"invalid value for trace mode option: {value.lower()}. "
            'Available options are "triton" and '
            '"opentelemetry"'
        )
    return value.lower()


def global_settings(settings: list[tuple[str, str]]) -> tuple[dict[str, object], list[str]]:
    """rate, level (repeatable; OFF wins), count and mode; the unknown ones apart."""
    values: dict[str, object] = {}
    levels: set[str] = set()
    disabled = False
    unknown = []
    for setting, value in settings:
        if setting == "rate":
            values["rate"] = integer(f"--trace-config {setting}", value, 0, UINT32_MAX)
        elif setting == "count":
            values["count"] = integer(f"--trace-config {setting}", value, -1, INT32_MAX)
        elif setting == "mode":
            values["mode"] = trace_mode(value)
        elif setting == "level":
            if value.lower() not in LEVEL_WORDS:
                raise ValueError(f"invalid value for trace level option: {value.lower()}")
            word = LEVEL_WORDS[value.lower()]
            disabled |= word is None
            levels.update([word] if word else [])
        else:
            unknown.append(f"{setting}={value}")
    values["level"] = frozenset() if disabled else frozenset(levels)
    return values, unknown


def triton_options(
    settings: list[tuple[str, str]], values: dict[str, object]
) -> tuple[tuple[str, str], ...]:
    """Triton mode: `file` is refused (no trace files here), `log-frequency` read; the rest
    reported as given."""
    others = []
    for setting, value in settings:
        if setting == "file":
            raise ValueError(FILE_REFUSAL)
        if setting == "log-frequency":
            values["log_frequency"] = integer(
                "--trace-config triton,log-frequency", value, 0, UINT32_MAX
            )
        else:
            others.append((setting, value))
    return tuple(others)


def opentelemetry_options(settings: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """OpenTelemetry mode: the settings as given (`bsp_*` checked), then the batch span
    processor's settings not given, from OTEL_BSP_* or their defaults."""
    options: list[tuple[str, str]] = []
    for setting, value in settings:
        if setting in BSP_SETTINGS:
            value = str(integer(f"--trace-config opentelemetry,{setting}", value, 0, UINT32_MAX))
        elif setting == "resource" and "=" not in value:
            raise ValueError(
                f"--trace-config opentelemetry,resource: expected <key>=<value>, got {value}"
            )
        options.append((setting, value))
    named = {setting for setting, _ in options}
    for setting, (variable, default) in BSP_SETTINGS.items():
        if setting not in named:
            raw = os.environ.get(variable, str(default))
            options.append((setting, str(integer(variable, raw, 0, UINT32_MAX))))
    return tuple(options)


def integer(name: str, value: str, low: int, high: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {value}") from None
    if not low <= number <= high:
        raise ValueError(f"{name}: expected an integer within [{low}, {high}], got {value}")
    return number
