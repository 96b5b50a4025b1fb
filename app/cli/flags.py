"""The command line's flags: Triton's (`tritonserver`'s groups, names, value types and
descriptions), each set onto a setting of ours or accepted without effect, and one flag of
ours per setting (`--<setting-name>`), generated from `Settings`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, get_args


class Kind(str, Enum):
    """How a flag's value is read (Triton's argument types)."""

    NONE = "none"
    INT = "integer"
    BOOL = "boolean"
    FLOAT = "float"
    STRING = "string"
    LOG_VERBOSE = "verbose"
    """An integer, or true (1) / false (0)."""


class Effect(str, Enum):
    """What a Triton flag does here."""

    SETTING = "setting"
    """Sets one of our settings."""
    IGNORED = "ignored"
    """Accepted (its value checked as Triton checks it) and logged: it tunes something this
    server does not have (thread counts, memory pools, directories of shared libraries)."""
    COMMAND_LINE = "command line"
    """Read by the command line itself (`CommandLine.options`), not a setting: no environment
    variable or TOML key names it (--log-file, as in Triton)."""


@dataclass(frozen=True)
class Flag:
    """One command-line flag."""

    name: str
    kind: Kind
    help: str
    setting: str | None = None
    """The `Settings` field it sets."""
    effect: Effect = Effect.SETTING
    convert: Callable[[Any], Any] | None = None
    """Triton's own check and conversion of the value (raising `ValueError` with its text)."""
    repeat: bool = False
    """Each use adds a value to the setting's list."""
    many: bool = False
    """Takes every following value up to the next flag (`--models a b`)."""
    also: dict[str, Any] = field(default_factory=dict)
    """Other settings it sets (Triton's --grpc-use-ssl-mutual also turns SSL on)."""
    arg: str = ""
    """The argument as --help shows it; default: the kind."""
    note: str = ""
    """How ours differs, for the docs."""

    @property
    def argument(self) -> str:
        return self.arg or ("" if self.kind is Kind.NONE else self.kind.value)


def setting(name: str, kind: Kind, field_name: str, help: str, **options: Any) -> Flag:
    return Flag(name, kind, help, setting=field_name, **options)


def ignored(name: str, kind: Kind, help: str, **options: Any) -> Flag:
    return Flag(name, kind, help, effect=Effect.IGNORED, **options)


def argument_of(annotation: Any) -> tuple[str, bool]:
    """How --help names a setting's value, and whether the setting is a list (one value per
    use of its flag)."""
    text = str(annotation).replace("typing.", "").replace("pathlib.", "")
    if text.startswith("list["):
        return argument_of(get_args(annotation)[0])[0], True
    if text.startswith("Literal["):
        return "|".join(str(choice) for choice in get_args(annotation)), False
    names = {"bool": "boolean", "int": "integer", "float": "float", "Path": "path", "str": "string"}
    base = text.split(" | ")[0].removeprefix("<class '").removesuffix("'>")
    return names.get(base, "string"), False
