"""The process's log settings, as Triton has them (--log-verbose, --log-info, --log-warning,
--log-error, --log-format): which records are written and how each line looks. Changed while
serving by Triton's logging extension; a change applies to the next record."""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import TextIO

from app.observability.access_log import AccessJsonFormatter

TRITON_FORMATS = ("default", "ISO8601")
"""The formats Triton's --log-format and logging extension take."""
LOG_FORMATS = (*TRITON_FORMATS, "text", "json")
LEVEL_LETTERS = {logging.ERROR: "E", logging.WARNING: "W"}
"""Triton's severity letters; anything below a warning (verbose messages too) is an 'I'."""


@dataclass(frozen=True)
class LogSettings:
    """Triton's log switches: each severity on or off, the verbose level (>= 1: debug
    messages too) and the line format."""

    info: bool = True
    warning: bool = True
    error: bool = True
    verbose: int = 0
    format: str = "default"

    def allows(self, level: int) -> bool:
        if level >= logging.ERROR:
            return self.error
        if level >= logging.WARNING:
            return self.warning
        if level >= logging.INFO:
            return self.info
        return self.verbose > 0

    @classmethod
    def of(
        cls, level: str, log_format: str, verbose: int, info: bool, warning: bool, error: bool
    ) -> LogSettings:
        """A least-severe level name and Triton's switches, together (each can only turn off)."""
        base = cls.from_level(level, log_format, verbose)
        return replace(base, info=base.info and info, warning=base.warning and warning, error=error)

    @classmethod
    def from_level(cls, level: str, log_format: str = "default", verbose: int = 0) -> LogSettings:
        """The switches for a least-severe level name (debug, info, warning, error)."""
        rank = ["debug", "info", "warning", "error"].index(level.lower())
        verbose = max(verbose, int(rank == 0))
        return cls(
            info=rank <= 1, warning=rank <= 2, error=True, verbose=verbose, format=log_format
        )


class TritonFormatter(logging.Formatter):
    """Triton's line formats: `I0520 20:03:25.829575 3355 file.py:41] message` ("default") or
    `2024-05-20T20:03:26Z I 3355 file.py:41] message` ("ISO8601"), times in UTC."""

    def __init__(self, iso8601: bool) -> None:
        super().__init__()
        self._iso8601 = iso8601
        self._pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        letter = "E" if record.levelno >= logging.ERROR else LEVEL_LETTERS.get(record.levelno, "I")
        utc = time.gmtime(record.created)
        if self._iso8601:
            prefix = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', utc)} {letter}"
        else:
            micros = int((record.created % 1) * 1_000_000)
            prefix = f"{letter}{time.strftime('%m%d %H:%M:%S', utc)}.{micros:06d}"
        line = f"{prefix} {self._pid} {record.filename}:{record.lineno}] {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def formatter(log_format: str) -> logging.Formatter:
    if log_format in TRITON_FORMATS:
        return TritonFormatter(iso8601=log_format == "ISO8601")
    if log_format == "json":
        return AccessJsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


class LogControl(logging.Filter):
    """The root logger's one handler, filtered and formatted by the current `LogSettings`."""

    def __init__(self) -> None:
        super().__init__()
        self.settings = LogSettings()
        self.file = ""
        """The file the log is appended to (Triton's --log-file); "": the console."""
        self._handler: logging.Handler = logging.StreamHandler()
        self._handler.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        return self.settings.allows(record.levelno)

    def configure(
        self, settings: LogSettings, stream: TextIO | None = None, file: str = ""
    ) -> None:
        """Make the root logger write through this control's handler only, with `settings`:
        appended to `file` if named (OSError if it cannot be opened), else to `stream`
        (default standard error)."""
        handler = (
            logging.FileHandler(file, encoding="utf-8")
            if file
            else logging.StreamHandler(stream or sys.stderr)
        )
        handler.addFilter(self)
        logging.getLogger().handlers[:] = [handler]
        self._handler.close()
        self._handler, self.file = handler, file
        self.apply(settings)

    def apply(self, settings: LogSettings) -> None:
        if settings.format not in LOG_FORMATS:
            raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}")
        if settings.format != self.settings.format or self._handler.formatter is None:
            self._handler.setFormatter(formatter(settings.format))
        self.settings = settings
        logging.getLogger().setLevel(logging.DEBUG if settings.verbose > 0 else logging.INFO)

    def update(self, **changes: object) -> LogSettings:
        """Change some switches (LogSettings' field names); the rest stay."""
        self.apply(replace(self.settings, **changes))  # type: ignore[arg-type]
        return self.settings


LOG_CONTROL = LogControl()
"""This process's log control (logging is process-wide)."""


def configure_logging(settings: LogSettings, file: str = "") -> None:
    """This process's log: `settings`, written to `file` (appended to), else to the console."""
    LOG_CONTROL.configure(settings, file=file)
