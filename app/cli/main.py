"""`tritonserver` (and `python -m app`): Triton's command line, then the server. Flags win over
environment variables, which win over the TOML file, which wins over the defaults."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Sequence
from typing import NoReturn

from pydantic import ValidationError

from app.cli.catalog import all_flags, env_name, usage
from app.cli.options_table import options_table
from app.cli.parser import CommandLine, HelpRequested, ParseError, parse
from app.errors import ModelConfigError
from app.launch.open_files import needed_open_files, raise_open_file_limit
from app.launch.quiet_exit import quiet_after_serving
from app.observability.vllm_notes import leave_out_compiler_notes
from app.settings import Settings

logger = logging.getLogger("app.cli")

leave_out_compiler_notes()  # before vLLM is imported: here, and in every process spawned

PROGRAM = "tritonserver"


def main(argv: Sequence[str] | None = None, prog: str = PROGRAM) -> None:
    """Parse the command line (on a mistake, Triton's message in one line, exit 1), then serve."""
    settings, command_line = settings_from(sys.argv[1:] if argv is None else argv, prog)
    log_to(settings, command_line.options.get("log-file", ""))
    warn_ignored(command_line.ignored)
    serve(settings, command_line.ignored)


def warn_ignored(ignored: Sequence[str]) -> None:
    """One warning per Triton flag taken without effect, saying why where the flag says."""
    notes = {flag.name: flag.note for flag in all_flags()}
    for flag in ignored:
        note = notes.get(flag.removeprefix("--").partition("=")[0], "")
        logger.warning(
            "%s: accepted for compatibility with tritonserver; it has no effect here%s",
            flag,
            f": {note}" if note else "",
        )


def settings_from(argv: Sequence[str], prog: str) -> tuple[Settings, CommandLine]:
    """The settings the command line, the environment and the TOML file give, and what the
    command line said; exits on a mistake."""
    try:
        command_line = parse(argv, all_flags(), prog)
    except HelpRequested:
        print(f"Usage: {prog} [options]\n{usage()}")
        raise SystemExit(0) from None
    except ParseError as exc:
        refuse(prog, exc.message, exc.getopt)
    try:
        settings = Settings(**command_line.values)
    except ValidationError as exc:
        refuse(prog, validation_message(exc, command_line))
    return settings, command_line


def log_to(settings: Settings, log_file: str) -> None:
    """Set up this process's log, appended to `log_file` if given (Triton's --log-file), else
    written to the console; a file that cannot be opened stops the start, as in Triton."""
    from app.main import configure_logs

    try:
        configure_logs(settings, log_file)
    except OSError as exc:
        print(
            f"error: setting log file: Internal - Failed to open log file: {exc.strerror}",
            file=sys.stderr,
        )
        raise SystemExit(1) from None


def refuse(prog: str, message: str, getopt: str = "") -> NoReturn:
    """A command line it cannot take: the reason first, one line per problem (getopt's own
    line, or Triton's message), then where the usage is; exit 1."""
    reasons = [getopt] if getopt else [f"{prog}: {line}" for line in message.splitlines()]
    usage_line = f"Usage: {prog} [options] ('{prog} --help' lists them)"
    print("\n".join([*reasons, usage_line]), file=sys.stderr)
    raise SystemExit(1)


def validation_message(exc: ValidationError, command_line: CommandLine) -> str:
    """Each problem in one line, under the flag (or environment variable) that gave the
    setting, as Triton words a bad option; a start-up rule's own text as it is."""
    lines = []
    for error in exc.errors():
        text = error["msg"].removeprefix("Value error, ")
        if not error["loc"]:
            lines.append(text)
            continue
        setting = str(error["loc"][0])
        source = command_line.flags.get(setting, env_name(setting))
        received = error.get("input")
        lines.append(f'Bad option: "{source}". {text}. Got {received}')
    return "\n".join(lines)


def serve(settings: Settings, ignored: Sequence[str] = ()) -> None:
    """Run the server: this process, or a supervisor and its frontend processes. Every port
    is taken first, so that one in use stops the start at once, before any engine loads;
    then Triton's options table (`ignored`: the flags taken without effect, as given)."""
    for option in settings.backend_config:
        logger.warning("--backend-config=%s: no backend setting applies to this server", option)
    processes = settings.frontend_process_count()
    if processes > 1 and not settings.allow_http:
        raise SystemExit("ALLOW_HTTP false: serve with FRONTEND_PROCESSES=1")
    raise_open_file_limit(needed_open_files(settings))
    http = take_ports(settings, keep_http=processes == 1)
    logger.info("%s", options_table(settings, ignored))
    if processes > 1:
        from app.launch.frontend_group import run

        run(settings, processes)
        return
    from app.launch.server import serve as serve_app
    from app.main import create_app, create_grpc_server

    try:
        app = create_app(settings)
    except ModelConfigError as exc:
        logger.error("%s", exc)
        print("error: creating server: Internal - failed to load all models", file=sys.stderr)
        raise SystemExit(1) from None
    grpc_server = create_grpc_server(settings, app.state.runtime)
    sockets = [] if http is None else [http]
    try:
        serve_app(app, settings.host, settings.port, settings.log_level, grpc_server, sockets)
    finally:
        quiet_after_serving()


def take_ports(settings: Settings, keep_http: bool) -> socket.socket | None:
    """Bind the HTTP port (kept if `keep_http`) and check the gRPC and metrics ports; one that
    cannot be had is logged in one line, naming it and its setting, and the start ends (1)."""
    from app.launch.ports import PortUnavailable, claim, ports_line

    try:
        http = claim(settings, keep_http)
    except PortUnavailable as exc:
        logger.error("%s", exc)
        raise SystemExit(1) from None
    logger.info("%s", ports_line(settings, http))
    return http
