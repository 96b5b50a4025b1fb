"""Work run in a few long-lived worker processes, bounded in memory and, job by job, in time.

A thread cannot be stopped nor its memory bounded; a process can. Each worker is spawned on
first use, sets its own memory bound (RLIMIT_DATA) before it sets up, then runs one job at a
time. A job that runs past its deadline, or whose caller leaves (its coroutine cancelled), or
that runs out of memory kills its worker, and a fresh one is started in its place; a worker
that could not set up is reported once and never started again for that pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import pickle
import resource
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

logger = logging.getLogger(__name__)

START_SECONDS = 600.0
"""How long a worker may take to set up (import its libraries, build its tables)."""
EXIT_WAIT_SECONDS = 1.0
"""How long a worker whose pipe closed is given to exit, for its exit status."""
THREAD_EXIT_SECONDS = 1.0
"""How long the threads a job started are given to end before its worker is replaced."""
PARENT_POLL_SECONDS = 1.0
"""How often a worker looks whether the process that started it is still there."""


@dataclass(frozen=True)
class WorkerOptions:
    """A pool's size and bounds."""

    workers: int = 1
    memory_mb: int = 2048
    job_seconds: float = 10.0


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker runs: `setup(payload)` once as it starts, then `handle(state, job)` for
    each job (module-level functions: the worker is spawned and imports them)."""

    name: str
    setup: Callable[[Any], Any]
    handle: Callable[[Any, Any], Any]
    payload: Any = None


class WorkerError(Exception):
    """A job that did not finish in its worker."""


class WorkerFailed(WorkerError):
    """The worker could not set up (the pool will not start another)."""


class JobTimedOut(WorkerError):
    """The job ran past its deadline; its worker was killed."""


class JobOutOfMemory(WorkerError):
    """The job needed more memory than the worker's bound; its worker was replaced."""


class JobCrashed(WorkerError):
    """The worker died while it ran the job (a crash, or the kernel's OOM killer)."""


class JobRaised(WorkerError):
    """The job raised an exception in the worker (its traceback, as text, is the message)."""


def serve(conn: Connection, spec: WorkerSpec, memory_bytes: int) -> None:
    """A worker's life: its memory bound, its set-up, then one job after another until the
    pipe closes."""
    watch_parent(os.getppid())
    name_process(spec.name)
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    try:
        state = spec.setup(spec.payload)
    except MemoryError:
        conn.send(("failed", f"its memory bound ({memory_bytes // 2**20} MB) is too low to start"))
        return
    except BaseException:  # noqa: BLE001 - reported to the pool, whatever it was
        conn.send(("failed", traceback.format_exc()))
        return
    conn.send(("ready", None))
    threads = set(threading.enumerate())
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        kind, value = outcome(spec.handle, state, job)
        if kind == "done" and left_running(threads):
            kind = "retire"
        conn.send((kind, value))


def name_process(name: str) -> None:
    """The worker's name in `ps` and /proc (its command line), where setproctitle is there."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(name)


def left_running(threads: set[threading.Thread]) -> bool:
    """Whether a job left a thread of its own running (vLLM gives up on a slow regex after a
    while but leaves its thread compiling): its worker is then replaced."""
    deadline = time.monotonic() + THREAD_EXIT_SECONDS
    for thread in set(threading.enumerate()) - threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return any(thread.is_alive() for thread in set(threading.enumerate()) - threads)


def outcome(handle: Callable[[Any, Any], Any], state: Any, job: Any) -> tuple[str, Any]:
    """("done", result), ("memory", reason) or ("raised", traceback) of one job ("retire",
    result: done, but the worker is to be replaced)."""
    try:
        return "done", handle(state, job)
    except MemoryError as exc:
        return "memory", str(exc) or "MemoryError"
    except Exception:  # noqa: BLE001 - reported to the caller, whatever it was
        return "raised", traceback.format_exc()


def watch_parent(parent: int) -> None:
    """Exit once the process that started this one is gone (killed, say, by the OOM killer),
    even in the middle of a job."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class Worker:
    """One worker process, from the pool's side: started when made, ready once it set up."""

    def __init__(self, spec: WorkerSpec, memory_mb: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process = context.Process(
            target=serve, args=(child, spec, memory_mb * 2**20), name=spec.name, daemon=True
        )
        self.process.start()
        child.close()
        self._ready = False
        self.retiring = False
        """Whether its last job left work running: the pool replaces it."""

    async def started(self, seconds: float) -> None:
        """Wait until the worker has set up; `WorkerFailed` if it could not."""
        if self._ready:
            return
        try:
            kind, value = await self._receive(seconds)
        except asyncio.TimeoutError:
            raise WorkerFailed(f"it did not start within {seconds:g} s") from None
        except JobCrashed as exc:
            raise WorkerFailed(f"it exited while it started ({exc})") from None
        if kind != "ready":
            raise WorkerFailed(str(value))
        self._ready = True

    async def run(self, job: bytes, seconds: float) -> Any:
        """The result of a job (pickled); `JobTimedOut`, `JobOutOfMemory`, `JobCrashed` or
        `JobRaised`."""
        try:
            await asyncio.to_thread(self._conn.send_bytes, job)
        except OSError:
            raise JobCrashed(await self._exit_status()) from None
        try:
            kind, value = await self._receive(seconds)
        except asyncio.TimeoutError:
            raise JobTimedOut(f"the job ran past {seconds:g} s") from None
        if kind == "memory":
            raise JobOutOfMemory(value)
        if kind == "raised":
            raise JobRaised(value)
        self.retiring = kind == "retire"
        return value

    async def _receive(self, seconds: float) -> tuple[str, Any]:
        """The worker's next message, waited for off the event loop's critical path."""
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = self._conn.fileno()

        def wake() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await asyncio.wait_for(readable, seconds)
        finally:
            loop.remove_reader(fd)
            os.set_blocking(fd, True)  # uvloop's reader left it non-blocking: sends would fail
        try:
            message: tuple[str, Any] = self._conn.recv()
        except (EOFError, OSError):
            raise JobCrashed(await self._exit_status()) from None
        return message

    async def _exit_status(self) -> str:
        await asyncio.to_thread(self.process.join, EXIT_WAIT_SECONDS)
        code = self.process.exitcode
        return f"exit status {code}" if code is not None else "its pipe closed"

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        """Kill the process now; reaped by a thread (never waited for on the event loop)."""
        with contextlib.suppress(OSError, ValueError):
            self.process.kill()
        self._conn.close()
        threading.Thread(target=self.process.join, name="worker-reaper", daemon=True).start()


class WorkerPool:
    """At most `options.workers` workers running `spec`, each started when a job first needs
    it; a job waits for a free one. A job that does not finish in its worker kills it, and a
    fresh one is started in its place at once, to be ready for the next job."""

    def __init__(self, spec: WorkerSpec, options: WorkerOptions) -> None:
        self._spec = spec
        self._options = options
        self._idle: list[Worker] = []
        self._free: asyncio.Semaphore | None = None
        self._failure: str | None = None
        self._closed = False

    @property
    def options(self) -> WorkerOptions:
        return self._options

    @property
    def workers(self) -> list[Worker]:
        """The idle workers (those running a job are their callers')."""
        return list(self._idle)

    async def run(self, job: Any) -> Any:
        """The job's result from a worker (`WorkerError` for one that did not finish). A job
        that cannot be pickled (nested too deeply: `RecursionError`) is the caller's error,
        and no worker is touched."""
        if self._failure is not None:
            raise WorkerFailed(self._failure)
        pickled = await asyncio.to_thread(pickle.dumps, job, pickle.HIGHEST_PROTOCOL)
        if self._free is None:
            self._free = asyncio.Semaphore(self._options.workers)
        async with self._free:
            worker = self._idle_worker() or self._start()
            try:
                await worker.started(START_SECONDS)
                result = await worker.run(pickled, self._options.job_seconds)
            except WorkerFailed as exc:
                worker.kill()
                self._failure = str(exc)
                raise
            except BaseException:
                worker.kill()
                self._replace()
                raise
            if self._closed or worker.retiring:
                worker.kill()
                self._replace()
            else:
                self._idle.append(worker)
            return result

    def _idle_worker(self) -> Worker | None:
        """An idle worker still alive (one the OOM killer took is let go)."""
        while self._idle:
            worker = self._idle.pop()
            if worker.alive:
                return worker
            worker.kill()
        return None

    def _start(self) -> Worker:
        return Worker(self._spec, self._options.memory_mb)

    def _replace(self) -> None:
        """A fresh worker in place of a killed one, setting up while no job needs it."""
        if not self._closed and self._failure is None:
            with contextlib.suppress(Exception):
                self._idle.append(self._start())

    def close(self) -> None:
        """Kill every idle worker; a worker running a job is killed when its job ends."""
        self._closed = True
        while self._idle:
            self._idle.pop().kill()
