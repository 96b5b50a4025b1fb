"""cancel_and_wait ends a task that swallowed a cancellation (as Python 3.11's asyncio.wait_for
can when its awaitable completes at that moment), where one cancel and a wait hung for good
(the supervisor's stop at shutdown, waiting on its health probe)."""

from __future__ import annotations

import asyncio

import pytest

from app.core.cancelling import cancel_and_wait


async def swallows_one_cancellation(swallowed: list[bool]) -> None:
    """A probe loop whose first cancellation is lost, as in wait_for's race."""
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append(True)


async def test_a_task_that_swallowed_its_cancellation_is_cancelled_again() -> None:
    swallowed: list[bool] = []
    task = asyncio.ensure_future(swallows_one_cancellation(swallowed))
    await asyncio.sleep(0.02)
    await asyncio.wait_for(cancel_and_wait(task), 5)
    assert swallowed == [True] and task.cancelled()


async def test_one_cancel_and_a_wait_would_hang_on_it() -> None:
    swallowed: list[bool] = []
    task = asyncio.ensure_future(swallows_one_cancellation(swallowed))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 1)
    await cancel_and_wait(task)


async def test_an_ended_task_is_left_as_it_is() -> None:
    async def fails() -> None:
        raise RuntimeError("x")

    task = asyncio.ensure_future(fails())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert isinstance(task.exception(), RuntimeError)
