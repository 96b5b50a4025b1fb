"""Every flag the command line takes: Triton's, then one per setting of ours (generated from
`Settings`), and the usage text --help prints from them."""

from __future__ import annotations

import json
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from app.cli.flags import Effect, Flag, Kind, argument_of, setting
from app.cli.grpc_metrics_tracing_flags import BACKEND, GRPC, METRICS, OTHERS, TRACING
from app.cli.serving_flags import HTTP, LOGGING, MODEL_REPOSITORY, SERVER
from app.paths import PROJECT_ROOT
from app.settings import Settings

OURS = [
    setting(
        "host", Kind.STRING, "host", "Address to listen on (HTTP, and gRPC unless GRPC_ADDRESS)."
    ),
    setting("port", Kind.INT, "port", "The HTTP port."),
    setting(
        "models", Kind.STRING, "models", "Load only these models of the repository.", many=True
    ),
    setting("log-level", Kind.STRING, "log_level", "debug, info, warning or error."),
]
TRITON_GROUPS: list[tuple[str, list[Flag]]] = [
    ("Server", SERVER),
    ("Logging", LOGGING),
    ("Model Repository", MODEL_REPOSITORY),
    ("HTTP", HTTP),
    ("GRPC", GRPC),
    ("Metrics", METRICS),
    ("Tracing", TRACING),
    ("Backend", BACKEND),
    ("Other Triton options", OTHERS),
]
"""Triton's flags in its --help groups (its Sagemaker and Vertex AI flags are not taken)."""
OUR_GROUP = "Settings of this server (each also an environment variable and a TOML key)"
WRAP = 60
"""Triton's usage wraps descriptions at 60 characters."""


def setting_flags(taken: set[str]) -> list[Flag]:
    """`--<setting-name>` for every setting that no flag of that name sets already."""
    flags = []
    for name, info in Settings.model_fields.items():
        flag_name = name.replace("_", "-")
        if flag_name in taken:
            continue
        argument, is_list = argument_of(info.annotation)
        flags.append(
            setting(
                flag_name, Kind.STRING, name, info.description or "", repeat=is_list, arg=argument
            )
        )
    return flags


@cache
def all_flags() -> tuple[Flag, ...]:
    triton = [flag for _, flags in TRITON_GROUPS for flag in flags]
    ours = [flag for flag in OURS if flag.name not in {f.name for f in triton}]
    taken = {flag.name for flag in (*triton, *ours)}
    return (*triton, *ours, *setting_flags(taken))


def our_flags() -> list[Flag]:
    triton = {flag.name for _, flags in TRITON_GROUPS for flag in flags}
    return [flag for flag in all_flags() if flag.name not in triton]


def env_name(setting: str) -> str:
    return setting.upper()


def default_text(info: FieldInfo) -> str:
    """A setting's default as the docs show it: JSON, project paths relative to the project."""
    default = info.get_default(call_default_factory=True)
    return json.dumps(plain(default))


def plain(value: Any) -> Any:
    if isinstance(value, Path):
        return (
            str(value.relative_to(PROJECT_ROOT))
            if value.is_relative_to(PROJECT_ROOT)
            else str(value)
        )
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def flag_note(flag: Flag) -> str:
    """What a Triton flag does here, in --help."""
    if flag.effect is Effect.IGNORED and flag.name != "help":
        return (
            f"[accepted; no effect here. {flag.note}]"
            if flag.note
            else "[accepted; no effect here]"
        )
    if flag.effect is Effect.COMMAND_LINE:
        return f"[command line only; default: the console. {flag.note}]"
    if flag.setting is None:
        return ""
    info = Settings.model_fields[flag.setting]
    return f"[{env_name(flag.setting)}; default {default_text(info)}]"


def describe(flag: Flag) -> str:
    head = f"  --{flag.name}" + (f" <{flag.argument}>" if flag.argument else "")
    text = " ".join(part for part in (flag.help, flag_note(flag)) if part)
    body = "\n\t".join(textwrap.wrap(text, WRAP)) if text else ""
    return f"{head}\n\t{body}"


def usage() -> str:
    """Triton's usage layout (a group title, then each flag and its wrapped description),
    its groups first, then ours."""
    flags = all_flags()
    by_name = {flag.name: flag for flag in flags}
    lines = [describe(by_name["help"])]
    for title, group in TRITON_GROUPS:
        lines.append(f"\n{title}:")
        lines += [describe(flag) for flag in group if flag.name != "help"]
    lines.append(f"\n{OUR_GROUP}:")
    lines += [describe(flag) for flag in our_flags()]
    return "\n".join(lines) + "\n"
