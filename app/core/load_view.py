"""What an engine reports of its load (requests running and waiting, KV-cache usage) as
routing between a model's instances reads it: the latest report, kept in a small buffer that
every frontend process of a shared engine core can read (a file mapped into each of them),
written by whichever process receives it. Pure: the buffer is given."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from app.core.kv_index import KvBlockIndex

RECORD = struct.Struct("<qqqd")
"""serial, running, waiting, KV-cache usage."""
BOARD_BYTES = RECORD.size


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One report of the engine: requests running and waiting, the share of its KV cache in
    use (0-1), and which report it is (`serial` grows by one a report)."""

    running: int
    waiting: int
    kv_usage: float
    serial: int


class LoadBoard:
    """The latest load report of one engine core. A reader racing a writer may see fields of
    two consecutive reports: each is an estimate of a moment already past anyway."""

    def __init__(self, buffer: bytearray | mmap.mmap | None = None) -> None:
        self._buffer = buffer if buffer is not None else bytearray(BOARD_BYTES)

    @classmethod
    def create_file(cls, path: Path) -> None:
        """A board's file, empty (no report yet)."""
        path.write_bytes(bytes(BOARD_BYTES))

    @classmethod
    def open_file(cls, path: Path) -> LoadBoard:
        """The board in `path` (made by `create_file`), mapped shared into this process."""
        with path.open("r+b") as file:
            return cls(mmap.mmap(file.fileno(), BOARD_BYTES))

    def write(self, running: int, waiting: int, kv_usage: float) -> None:
        serial = RECORD.unpack_from(self._buffer)[0] + 1
        RECORD.pack_into(self._buffer, 0, serial, running, waiting, kv_usage)

    def read(self) -> EngineLoad | None:
        """The latest report; None before the first."""
        serial, running, waiting, kv_usage = RECORD.unpack_from(self._buffer)
        if serial == 0:
            return None
        return EngineLoad(max(running, 0), max(waiting, 0), min(max(kv_usage, 0.0), 1.0), serial)

    def close(self) -> None:
        if isinstance(self._buffer, mmap.mmap):
            self._buffer.close()


@dataclass(eq=False)
class EngineSignals:
    """What an engine tells routing between instances (`InferenceEngine.routing_signals`):
    its latest load report, and what its KV cache holds (None: it does not publish that)."""

    board: LoadBoard
    cache: KvBlockIndex | None = None
    clients: int = 1
    """Frontend processes sharing the engine (each routes its own requests)."""


class PendingCount:
    """The requests this process sent to an engine since the report it last saw: the ones
    that report cannot hold yet."""

    def __init__(self) -> None:
        self.serial = 0
        self.count = 0

    def since(self, report: EngineLoad | None) -> int:
        """The count since `report`, starting over when it is a newer one."""
        serial = report.serial if report is not None else 0
        if serial != self.serial:
            self.serial, self.count = serial, 0
        return self.count


def signals_of(engine: object) -> EngineSignals | None:
    """An engine's routing signals (`routing_signals`), where it has any."""
    signals = getattr(engine, "routing_signals", None)
    return signals if isinstance(signals, EngineSignals) else None
