"""tritonserver's command-line parsing (GNU getopt_long as Triton calls it): `--flag value` or
`--flag=value`, unique prefixes of flag names, and its messages for every mistake."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.cli.flags import Effect, Flag, Kind
from app.cli.values import boolean, floating, int_or_bool, integer

READERS: dict[Kind, Callable[[str], Any]] = {
    Kind.INT: integer,
    Kind.BOOL: boolean,
    Kind.FLOAT: floating,
    Kind.LOG_VERBOSE: int_or_bool,
    Kind.STRING: str,
}


class ParseError(Exception):
    """A command line tritonserver refuses: `getopt` is getopt's own line (printed first),
    `message` the text printed after the usage."""

    def __init__(self, message: str = "", getopt: str = "") -> None:
        super().__init__(message or getopt)
        self.message = message
        self.getopt = getopt


class HelpRequested(Exception):
    """`--help`: print the usage and exit."""


@dataclass
class CommandLine:
    """What the flags set: settings (field -> value), which flag set each, and the flags
    accepted without effect."""

    values: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)
    """Setting -> the flag (`--http-port`) that set it last."""
    ignored: list[str] = field(default_factory=list)
    """`--flag=value` of each flag taken without effect, as given."""
    options: dict[str, Any] = field(default_factory=dict)
    """Flag name -> value of the flags the command line reads itself (`--log-file`)."""


def parse(argv: Sequence[str], flags: Sequence[Flag], prog: str) -> CommandLine:
    """Read `argv` as tritonserver does; raise `ParseError` (or `HelpRequested`)."""
    result = CommandLine()
    positional: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg == "--":
            positional += argv[index:]
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        if not arg.startswith("--"):
            raise ParseError(getopt=f"{prog}: invalid option -- '{arg[1]}'")
        name, has_value, value = arg[2:].partition("=")
        flag = find_flag(name, arg, flags, prog)
        values, index = flag_values(flag, has_value, value, argv, index, prog)
        for text in values:
            apply(flag, read_value(flag, text), text, result)
    if positional:
        raise ParseError(f"Unexpected argument: {positional[0]}")
    return result


def find_flag(name: str, arg: str, flags: Sequence[Flag], prog: str) -> Flag:
    """The flag `name` spells, or the one flag it is a prefix of: getopt_long's rule, where a
    prefix of two flags is ambiguous, each of Triton's flags being an option of its own (bar
    --model-store and --model-repository, which no prefix names alone)."""
    exact = [flag for flag in flags if flag.name == name]
    if exact:
        return exact[0]
    candidates = [flag for flag in flags if flag.name.startswith(name)] if name else []
    if not candidates:
        raise ParseError(getopt=f"{prog}: unrecognized option '{arg}'")
    if len(candidates) > 1:
        possibilities = "".join(f" '--{flag.name}'" for flag in candidates)
        raise ParseError(
            getopt=f"{prog}: option '{arg.partition('=')[0]}' is ambiguous; "
            f"possibilities:{possibilities}"
        )
    return candidates[0]


def flag_values(
    flag: Flag, has_value: str, value: str, argv: Sequence[str], index: int, prog: str
) -> tuple[list[str], int]:
    """The flag's value(s) (`--flag=value`, or the next argument) and the next index."""
    if flag.kind is Kind.NONE:
        if has_value:
            raise ParseError(getopt=f"{prog}: option '--{flag.name}' doesn't allow an argument")
        return [""], index
    if has_value:
        values = [value]
    elif index < len(argv):
        values, index = [argv[index]], index + 1
    else:
        raise ParseError(getopt=f"{prog}: option '--{flag.name}' requires an argument")
    while flag.many and index < len(argv) and not argv[index].startswith("-"):
        values.append(argv[index])
        index += 1
    return values, index


def read_value(flag: Flag, text: str) -> Any:
    """The value as Triton reads and checks it, or `Bad option: "--flag".` and Triton's text
    (one line)."""
    if flag.name == "help":
        raise HelpRequested()
    if flag.kind is Kind.NONE:
        return True
    try:
        value = READERS[flag.kind](text)
        return value if flag.convert is None else flag.convert(value)
    except ValueError as exc:
        raise ParseError(f'Bad option: "--{flag.name}". {exc}') from exc


def apply(flag: Flag, value: Any, text: str, result: CommandLine) -> None:
    if flag.effect is Effect.COMMAND_LINE:
        result.options[flag.name] = value
        return
    if flag.effect is Effect.IGNORED or flag.setting is None:
        result.ignored.append(f"--{flag.name}" + (f"={text}" if flag.kind is not Kind.NONE else ""))
        return
    if flag.repeat or flag.many:
        values: list[Any] = result.values.get(flag.setting, [])
        if flag.many and result.flags.get(flag.setting) != f"--{flag.name}":
            values = []
        if value not in values:
            values = [*values, value]
        result.values[flag.setting] = values
    else:
        result.values[flag.setting] = value
    result.flags[flag.setting] = f"--{flag.name}"
    for other, fixed in flag.also.items():
        result.values[other] = fixed
        result.flags[other] = f"--{flag.name}"
