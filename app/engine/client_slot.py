"""Where a frontend process connects its client of a shared engine core (no vLLM import:
the frontends' wiring names these types without loading the engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.repository.layout import ModelSpec


@dataclass(frozen=True)
class ClientSlot:
    """Where frontend `index` of `count` connects its client to one engine core."""

    input_address: str
    output_address: str
    count: int
    index: int
    load_board: str = ""
    """The file of the core's load reports, shared by its clients (app/core/load_view.py)."""
    kv_events_address: str = ""
    """Where the core publishes its KV-cache events ("" where it does not)."""

    def client_addresses(self) -> dict[str, str]:
        return {"input_address": self.input_address, "output_address": self.output_address}


class CoreBroker(Protocol):
    """Hands a frontend process its client slot of the shared engine core of an instance of
    a model version."""

    async def acquire(self, spec: ModelSpec) -> ClientSlot:
        """This process's slot of a running core for `spec` (its instance, `spec.instance`;
        a fresh core if this process already used its slot of the current one)."""
        ...

    async def release(self, slot: ClientSlot) -> None: ...
