"""The model table Triton logs once its models are loaded: each model version and its state
(`READY`, or `UNAVAILABLE: <reason>`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.repository.index import RepositoryEntry

HEADERS = ("Model", "Version", "Status")


def model_rows(entries: Iterable[RepositoryEntry]) -> list[tuple[str, str, str]]:
    """One row per model version loaded or tried; one that failed shows '-' and why. Models
    never asked for (explicit mode) are left out, as Triton leaves them."""
    rows = []
    for entry in entries:
        if not entry.state:
            continue
        status = f"{entry.state}: {entry.reason}" if entry.reason else entry.state
        rows.append((entry.name, entry.version or "-", status))
    return rows


def ascii_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Triton's table printer: `+---+` rules, `| cell |` rows, columns as wide as their
    widest cell, the whole starting with a line break (it follows the log line's prefix)."""
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    rule = "+" + "+".join("-" * (width + 2) for width in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return (
            "|"
            + "|".join(f" {cell!s:<{width}} " for cell, width in zip(cells, widths, strict=True))
            + "|"
        )

    return "\n".join(["", rule, line(headers), rule, *(line(row) for row in rows), rule, ""])


def model_table(entries: Iterable[RepositoryEntry]) -> str:
    return ascii_table(HEADERS, model_rows(entries))
