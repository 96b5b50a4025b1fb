"""The engine core of one instance of a model version, shared by several frontend processes,
through vLLM's own multi-client engine support (what `vllm serve --api-server-count N` uses):
the core tags each request with its client's index and sends the outputs back to that client
only.

The host (in the supervising process) launches the core with one pair of ZMQ addresses per
client and watches it; each frontend connects one `AsyncLLM` client to its pair
(`VllmEngine` with a `ClientSlot`). A core accepts each client once: a client that must be
replaced (a reload, a restart) needs a new core.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from pathlib import Path
from typing import Any

import zmq
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.usage.usage_lib import UsageContext
from vllm.v1.engine.core import EngineCoreProc
from vllm.v1.engine.utils import EngineZmqAddresses, launch_core_engines
from vllm.v1.executor import Executor

from app.core.load_view import LoadBoard
from app.engine.client_slot import ClientSlot
from app.engine.kv_events import SHARED_CORE_EVENTS, with_kv_events
from app.engine.placement import starting_on
from app.engine.processes import engine_processes_of, kill_survivors
from app.repository.layout import ModelSpec

logger = logging.getLogger(__name__)

CORE_RANK = -1
"""vLLM's API-process rank of the engine core itself."""
DEAD_NOTICE_LINGER_MS = 2000
STOP_TIMEOUT_SECONDS = 5.0


def shared_engine_config(engine_args: dict[str, Any], count: int, rank: int) -> Any:
    """The `VllmConfig` of a core (rank -1) or of its client `rank` of `count`, built the same
    way on both sides (`vllm serve`'s usage context), from fresh arguments each time."""
    args = AsyncEngineArgs(**engine_args)
    args._api_process_count = count  # vLLM's own multi-API-server fields
    args._api_process_rank = rank
    return args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


class EngineCoreHost:
    """The engine-core processes of one instance of a model version (`spec.instance`)
    serving `count` frontend clients."""

    def __init__(self, spec: ModelSpec, count: int, run_dir: Path) -> None:
        self.spec = spec
        self.count = count
        self._run_dir = run_dir
        self._manager: Any = None
        self._processes: list[Any] = []
        token = uuid.uuid4().hex[:12]
        self._board = run_dir / f"{token}-load"
        LoadBoard.create_file(self._board)
        events = spec.engine_args.get("kv_events_config") == SHARED_CORE_EVENTS
        self._events = f"ipc://{run_dir}/{token}-kv" if events else ""
        self.slots = [
            ClientSlot(
                input_address=f"ipc://{run_dir}/{token}-in-{index}",
                output_address=f"ipc://{run_dir}/{token}-out-{index}",
                count=count,
                index=index,
                load_board=str(self._board),
                kv_events_address=self._events,
            )
            for index in range(count)
        ]

    def launch(self) -> None:
        """Start the core, its processes placed as its instance is, and return once it is
        ready (blocking: run it in a thread). The clients may connect before or after."""
        with starting_on(self.spec.instance):
            self._launch()

    def _launch(self) -> None:
        engine_args = self.spec.engine_args
        if self._events:
            engine_args = with_kv_events(engine_args, self._events)
        config = shared_engine_config(engine_args, self.count, CORE_RANK)
        log_stats = not AsyncEngineArgs(**engine_args).disable_log_stats
        addresses = EngineZmqAddresses(
            inputs=[slot.input_address for slot in self.slots],
            outputs=[slot.output_address for slot in self.slots],
        )
        with launch_core_engines(
            config, Executor.get_class(config), log_stats, addresses
        ) as launch:
            self._manager = launch[0] if isinstance(launch, tuple) else launch.engine_manager
        self._processes = engine_processes_of(self._manager)

    def wait_until_dead(self) -> None:
        """Block until a core process exits (run it in a thread); returns at once once stopped."""
        if self._manager is not None:
            self._manager.monitor_engine_liveness()

    @property
    def is_alive(self) -> bool:
        if self._manager is None:
            return False
        return not any(not process.is_alive() for process in self._manager.processes)

    def notify_dead(self) -> None:
        """Tell every client that the core is gone, with vLLM's own message: their requests
        end with `EngineDeadError` at once (a killed core could not tell them itself)."""
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        for slot in self.slots:
            with contextlib.closing(context.socket(zmq.PUSH)) as socket:
                socket.setsockopt(zmq.LINGER, DEAD_NOTICE_LINGER_MS)
                socket.connect(slot.output_address)
                socket.send(EngineCoreProc.ENGINE_CORE_DEAD)

    def stop(self) -> None:
        """Stop the core (blocking) and leave none of its processes or sockets behind."""
        manager, self._manager = self._manager, None
        if manager is not None:
            manager.shutdown(timeout=STOP_TIMEOUT_SECONDS)
        kill_survivors(self._processes)
        for slot in self.slots:
            for address in (slot.input_address, slot.output_address):
                Path(address.removeprefix("ipc://")).unlink(missing_ok=True)
        if self._events:
            Path(self._events.removeprefix("ipc://")).unlink(missing_ok=True)
        self._board.unlink(missing_ok=True)
