"""The options table Triton logs at start (`| Option | Value |`): Triton's rows, each with its
value here. Options this server has show what it does (the response cache, the rate limiter:
off); the tuning options it takes without effect show the value given, or Triton's default."""

from __future__ import annotations

from collections.abc import Sequence

import app as package
from app.cli.triton_defaults import TRITON_DEFAULTS
from app.settings import Settings
from app.triton.model_table import ascii_table
from app.triton.server_metadata import EXTENSIONS, SERVER_NAME

HEADERS = ("Option", "Value")
CONTROL_MODES = {"none": "MODE_NONE", "poll": "MODE_POLL", "explicit": "MODE_EXPLICIT"}
"""How Triton names each --model-control-mode in the table."""
MIN_COMPUTE_CAPABILITY = "6.0"
"""tritonserver's --min-supported-compute-capability default."""


def ignored_values(ignored: Sequence[str]) -> dict[str, str]:
    """Flag name -> value of each flag taken without effect (`--name=value`, as the command
    line records them)."""
    values = {}
    for flag in ignored:
        name, _, value = flag.removeprefix("--").partition("=")
        values[name] = value
    return values


def option_rows(settings: Settings, ignored: dict[str, str]) -> list[tuple[str, str]]:
    """Triton's rows, in its order."""
    rows = [
        ("server_id", SERVER_NAME),
        ("server_version", package.__version__),
        ("server_extensions", " ".join(EXTENSIONS)),
    ]
    rows += [
        (f"model_repository_path[{index}]", str(path))
        for index, path in enumerate(settings.model_repository)
    ]
    rows.append(("model_control_mode", CONTROL_MODES[settings.model_control_mode]))
    if settings.model_control_mode == "explicit":
        rows += [(f"startup_models_{i}", name) for i, name in enumerate(settings.load_model)]
    pool_flag = "pinned-memory-pool-byte-size"
    pool = ignored.get(pool_flag, TRITON_DEFAULTS[pool_flag])
    capability = ignored.get("min-supported-compute-capability", MIN_COMPUTE_CAPABILITY)
    rows += [
        ("strict_model_config", "0"),
        ("model_config_name", settings.model_config_name),
        ("rate_limit", "OFF"),
        ("pinned_memory_pool_byte_size", pool),
        ("min_supported_compute_capability", f"{float(capability):.1f}"),
        ("strict_readiness", str(int(settings.strict_readiness))),
        ("exit_timeout", f"{settings.drain_timeout_seconds:g}"),
        ("cache_enabled", "0"),
    ]
    return rows


def options_table(settings: Settings, ignored: Sequence[str] = ()) -> str:
    """The table as Triton logs it (a line break first: it follows the log line's prefix)."""
    return ascii_table(HEADERS, option_rows(settings, ignored_values(ignored)))
