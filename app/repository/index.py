"""The repository index (Triton's POST /v2/repository/index): every model of the repository
folders, each loaded version with its state, and why a model is not loaded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.repository.layout import DUPLICATE_REASON
from app.repository.served_model import ModelState, ServedModel

UNAVAILABLE = ModelState.UNAVAILABLE.value

UNAVAILABLE_REASONS = {
    ModelState.RESTARTING: "engine failed: restarting it",
    ModelState.FAILED: "engine failed: restarts exhausted",
}


@dataclass(frozen=True)
class RepositoryEntry:
    """One line of the repository index."""

    name: str
    version: str | None
    state: str
    """Empty for a model never loaded (Triton lists it with its name only)."""
    reason: str = ""


def repository_index(
    folders: Mapping[str, Path],
    duplicates: set[str],
    loaded: Mapping[str, Mapping[str, ServedModel]],
    reasons: Mapping[str, str],
) -> list[RepositoryEntry]:
    """Every model of the repository `folders` with the state of each `loaded` version (a
    model in two repositories, one of `duplicates`, is UNAVAILABLE, as Triton lists it); one
    not loaded shows its reason if it has one (a failed load, an unload)."""
    entries = []
    for name in sorted(folders.keys() | duplicates):
        if name in duplicates:
            entries.append(RepositoryEntry(name, None, UNAVAILABLE, DUPLICATE_REASON))
            continue
        versions = loaded.get(name, {})
        entries.extend(index_entry(versions[v]) for v in sorted(versions, key=int))
        if not versions and name in reasons:
            entries.append(RepositoryEntry(name, None, UNAVAILABLE, reasons[name]))
        elif not versions:
            entries.append(RepositoryEntry(name, None, ""))
    return entries


def index_entry(served: ServedModel) -> RepositoryEntry:
    """A loaded version as the index shows it: a failed engine is UNAVAILABLE with a reason."""
    if served.state in UNAVAILABLE_REASONS:
        reason = UNAVAILABLE_REASONS[served.state]
        return RepositoryEntry(served.name, served.version, UNAVAILABLE, reason)
    if served.state is ModelState.READY and not served.is_ready:
        return RepositoryEntry(served.name, served.version, UNAVAILABLE, "engine unhealthy")
    return RepositoryEntry(served.name, served.version, served.state.value)
