"""Worker processes with a memory bound and a deadline per job: a job past its deadline, over
the bound, or whose caller left kills its worker, and a fresh one takes its place; a worker
that cannot set up is reported once; a worker outlives neither its job's caller nor its
parent. The jobs are tiny fakes (sleep, spin, allocate) run in real spawned processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import psutil
import pytest
import uvloop

from app.engine.worker_pool import (
    JobCrashed,
    JobOutOfMemory,
    JobRaised,
    JobTimedOut,
    WorkerFailed,
    WorkerOptions,
    WorkerPool,
    WorkerSpec,
)
from app.paths import PROJECT_ROOT

WAIT_SECONDS = 60.0
"""Generous bound on anything a slow host does: a spawn, a kill, a reap."""


def fake_setup(payload: str) -> str:
    """A worker's set-up: fails, or needs 1 GB, when told to."""
    if payload == "fail":
        raise RuntimeError("cannot set up: told to fail")
    if payload == "greedy":
        return str(len(bytearray(2**30)))
    return payload


def fake_job(state: str, job: tuple[str, Any]) -> Any:
    """echo (the worker's pid and state), sleep, spin, allocate MB, exit, raise, or leave a
    thread sleeping."""
    kind, value = job
    if kind == "sleep":
        time.sleep(value)
    elif kind == "spin":
        while True:
            pass
    elif kind == "allocate":
        return len(bytearray(value * 2**20))
    elif kind == "exit":
        os._exit(value)
    elif kind == "raise":
        raise ValueError(value)
    elif kind == "thread":
        threading.Thread(target=time.sleep, args=(value,), daemon=True).start()
    return os.getpid(), state


def pool_of(payload: str = "ready", **options: Any) -> WorkerPool:
    spec = WorkerSpec("test-worker", fake_setup, fake_job, payload)
    return WorkerPool(spec, WorkerOptions(**{"workers": 1, "memory_mb": 512, **options}))


@pytest.fixture
async def pool() -> AsyncIterator[WorkerPool]:
    pool = pool_of(job_seconds=WAIT_SECONDS)
    yield pool
    pool.close()


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_SECONDS} s: {what}"
        await asyncio.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def test_jobs_run_in_one_long_lived_worker_process(pool: WorkerPool) -> None:
    first = await pool.run(("echo", None))
    second = await pool.run(("echo", None))
    assert first == second == (first[0], "ready")
    assert first[0] != os.getpid()


async def test_a_job_nested_too_deeply_to_send_is_the_callers_error_and_keeps_the_worker(
    pool: WorkerPool,
) -> None:
    """A grammar 400 levels deep cannot be pickled: refused without a worker's restart."""
    pid, _ = await pool.run(("echo", None))
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        await pool.run(("echo", deep))
    assert (await pool.run(("echo", None)))[0] == pid


async def test_a_job_past_its_deadline_kills_its_worker_and_a_fresh_one_replaces_it() -> None:
    pool = pool_of(job_seconds=1.0)
    try:
        pid, _ = await pool.run(("echo", None))
        with pytest.raises(JobTimedOut, match="ran past 1 s"):
            await pool.run(("sleep", 3600))
        await wait_until(lambda: gone(pid), "the timed-out worker is killed")
        assert [worker.alive for worker in pool.workers] == [True]
        fresh, _ = await pool.run(("echo", None))
        assert fresh != pid
    finally:
        pool.close()


async def test_a_job_over_the_memory_bound_is_refused_and_its_worker_replaced(
    pool: WorkerPool,
) -> None:
    pid, _ = await pool.run(("echo", None))
    assert await pool.run(("allocate", 64)) == 64 * 2**20
    with pytest.raises(JobOutOfMemory):
        await pool.run(("allocate", 1024))
    await wait_until(lambda: gone(pid), "the worker that ran out of memory is killed")
    fresh, _ = await pool.run(("echo", None))
    assert fresh != pid


async def test_a_caller_that_leaves_kills_the_work(pool: WorkerPool) -> None:
    pid, _ = await pool.run(("echo", None))
    spinning = asyncio.ensure_future(pool.run(("spin", None)))
    worker = psutil.Process(pid)
    await wait_until(lambda: worker.cpu_times().user > 0.5, "the worker spins")
    spinning.cancel()
    with pytest.raises(asyncio.CancelledError):
        await spinning
    await wait_until(lambda: gone(pid), "the worker of the cancelled job is killed")
    fresh, _ = await pool.run(("echo", None))
    assert fresh != pid


async def test_a_job_that_leaves_a_thread_running_has_its_worker_replaced(
    pool: WorkerPool,
) -> None:
    """As vLLM's regex compile does when it gives up on a pattern: its thread runs on."""
    pid, _ = await pool.run(("thread", 0.01))
    assert (await pool.run(("thread", 3600)))[0] == pid
    await wait_until(lambda: gone(pid), "the worker with a thread left running is replaced")
    fresh, _ = await pool.run(("echo", None))
    assert fresh != pid


def test_large_jobs_go_through_under_uvloop() -> None:
    """uvloop (the server's loop) leaves a pipe it watched non-blocking: a job larger than the
    pipe's buffer must still reach the worker whole."""
    large = "x" * 32 * 2**20

    async def run_twice() -> list[Any]:
        pool = pool_of(job_seconds=WAIT_SECONDS)
        try:
            return [await pool.run(("echo", None)), await pool.run(("echo", large))]
        finally:
            pool.close()

    first, second = uvloop.run(run_twice())
    assert first[0] == second[0]


async def test_a_crash_or_an_exception_in_a_job_is_reported(pool: WorkerPool) -> None:
    with pytest.raises(JobCrashed, match="exit status 3"):
        await pool.run(("exit", 3))
    with pytest.raises(JobRaised, match="ValueError: boom"):
        await pool.run(("raise", "boom"))
    assert (await pool.run(("echo", None)))[1] == "ready"


async def test_a_worker_that_cannot_set_up_is_reported_once_and_not_started_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = pool_of("fail")
    with pytest.raises(WorkerFailed, match="cannot set up: told to fail"):
        await pool.run(("echo", None))
    started: list[object] = []
    monkeypatch.setattr(pool, "_start", lambda: started.append(1))
    with pytest.raises(WorkerFailed, match="cannot set up: told to fail"):
        await pool.run(("echo", None))
    assert started == []


async def test_a_worker_whose_set_up_needs_more_than_its_bound_says_so() -> None:
    with pytest.raises(WorkerFailed, match=r"its memory bound \(512 MB\) is too low to start"):
        await pool_of("greedy").run(("echo", None))


async def test_jobs_wait_for_a_free_worker_and_close_kills_the_idle_ones() -> None:
    pool = pool_of(workers=2, job_seconds=WAIT_SECONDS)
    results = await asyncio.gather(*(pool.run(("sleep", 0.2)) for _ in range(5)))
    pids = {pid for pid, _ in results}
    assert len(pids) <= 2
    pool.close()
    await wait_until(lambda: all(gone(pid) for pid in pids), "close kills the idle workers")


PARENT = textwrap.dedent(
    """
    import asyncio, os, psutil
    from tests.unit.test_worker_pool import pool_of, wait_until

    async def main() -> None:
        pool = pool_of()
        pid, _ = await pool.run(("echo", None))
        print(pid, flush=True)
        spinning = asyncio.ensure_future(pool.run(("spin", None)))
        worker = psutil.Process(pid)
        await wait_until(lambda: worker.cpu_times().user > 0.5, "the worker spins")
        os._exit(0)

    if __name__ == "__main__":
        asyncio.run(main())
    """
)


async def test_a_worker_exits_when_the_process_that_started_it_is_gone() -> None:
    """Killed (here: exited without stopping it) in the middle of a job, the server leaves no
    worker behind."""
    parent = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", PARENT],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
        check=True,
    )
    pid = int(parent.stdout.split()[0])
    await wait_until(lambda: gone(pid), "the orphaned worker exits")
