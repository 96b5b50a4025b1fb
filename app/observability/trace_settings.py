"""Triton's trace settings (src/tracer.cc's TraceManager): the global setting and a setting per
model, each field either set or following its fallback (the global setting for a model, the
start-up setting for the global one), and the sampling of requests by rate and count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from app.errors import InvalidRequestError
from app.observability.trace_config import TENSORS, TIMESTAMPS, TRITON_MODE, TraceConfig

FIELDS = ("level", "rate", "count", "log_frequency")
"""What the trace extension can change (the file never: it is refused)."""
SettingsChange = Mapping[str, object]
"""Field -> new value, or None to clear it (follow the fallback again); absent: unchanged."""


@dataclass
class TraceSetting:
    """One setting, with the fields it sets itself (`own_fields`; the others follow its
    fallback), and its sampling state (the remaining `count` goes down as requests are
    traced, as Triton reports it)."""

    level: frozenset[str]
    rate: int
    count: int
    log_frequency: int
    file: str
    mode: str
    options: tuple[tuple[str, str], ...]
    own_fields: frozenset[str] = frozenset()
    sampled: int = 0

    @property
    def invalid_reason(self) -> str | None:
        if not self.level:
            return "tracing is disabled"
        if self.rate == 0:
            return "sample rate must be non-zero"
        if self.mode == TRITON_MODE and not self.file:
            return "trace file name is not given"
        return None

    def sample(self, forced: bool) -> bool:
        """Whether to trace the next request: every `rate`-th one while `count` lasts (-1: no
        end), or one that carries a trace context (`forced`), unless tracing is OFF."""
        if not self.level:
            return False
        hit = False
        if self.rate != 0:
            if self.invalid_reason is not None and not forced:
                return False
            self.sampled += 1
            hit = self.sampled % self.rate == 0
            if hit and self.count > 0:
                self.count -= 1
            elif hit and self.count == 0:
                hit = False
        return hit or forced

    def report(self) -> list[tuple[str, list[str]]]:
        """The setting as the trace extension answers it, in Triton's order."""
        levels = [name for name in (TIMESTAMPS, TENSORS) if name in self.level] or ["OFF"]
        entries = [
            ("trace_level", levels),
            ("trace_rate", [str(self.rate)]),
            ("trace_count", [str(self.count)]),
        ]
        if self.mode == TRITON_MODE:
            entries += [("log_frequency", [str(self.log_frequency)]), ("trace_file", [self.file])]
        entries.append(("trace_mode", [self.mode]))
        for key, value in self.options:
            if key not in ("file", "log-frequency"):
                entries.append((key, [value]))
        return entries


def from_config(config: TraceConfig) -> TraceSetting:
    return TraceSetting(
        level=config.level,
        rate=config.rate,
        count=config.count,
        log_frequency=config.log_frequency,
        file=config.file,
        mode=config.mode,
        options=config.options,
    )


class TraceSettings:
    """The global setting and the models' own, updated and read as Triton's trace extension
    does it."""

    def __init__(self, config: TraceConfig) -> None:
        self._default = from_config(config)
        self._global = from_config(config)
        self._models: dict[str, TraceSetting] = {}
        self._following: set[str] = set()
        """Models whose setting leaves some field to the global setting."""

    @property
    def mode(self) -> str:
        return self._global.mode

    def get(self, model: str = "") -> TraceSetting:
        """A model's setting (the global one where it has none); '' for the global one."""
        return self._models.get(model, self._global) if model else self._global

    def update(self, model: str, change: SettingsChange) -> None:
        """Apply a change to a model's setting ('' the global one; models that follow it
        follow the change). An invalid setting other than OFF is refused with Triton's
        message, leaving every setting as it was."""
        self._update(model, change)
        if not model:
            for name in sorted(self._following):
                self._update(name, {})

    def _update(self, model: str, change: SettingsChange) -> None:
        current = self._models.get(model) if model else self._global
        fallback = self._global if model else self._default
        values = {name: getattr(fallback, name) for name in FIELDS}
        own_fields = set()
        for name in FIELDS:
            cleared = name in change and change[name] is None
            if not cleared and (
                name in change or (current is not None and name in current.own_fields)
            ):
                own_fields.add(name)
                values[name] = change[name] if name in change else getattr(current, name)
        own_file = current is not None and "file" in current.own_fields
        setting = replace(
            fallback,
            **values,
            file=current.file if own_file and current is not None else fallback.file,
            own_fields=frozenset(own_fields | ({"file"} if own_file else set())),
            sampled=0,
        )
        if model and not setting.own_fields:
            self._models.pop(model, None)
            self._following.discard(model)
            return
        if setting.invalid_reason is not None and setting.level:
            raise InvalidRequestError(
                f"Attempting to set invalid trace setting :{setting.invalid_reason}"
            )
        if model:
            self._models[model] = setting
            self._following.add(model)
        else:
            self._global = setting


def change_to_json(change: SettingsChange) -> dict[str, object]:
    """A change as JSON (to hand it to another process): levels as a sorted list."""
    return {
        name: sorted(value) if isinstance(value, frozenset) else value
        for name, value in change.items()
    }


def change_from_json(data: Mapping[str, object]) -> dict[str, object]:
    return {
        name: frozenset(value) if name == "level" and isinstance(value, list) else value
        for name, value in data.items()
    }
