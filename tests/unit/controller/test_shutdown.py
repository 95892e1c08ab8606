"""A shutdown's cancel must stop the loops even when it meets a wake-up.

Python 3.11's asyncio.wait_for lost a cancel that arrived in the loop iteration where the awaited
event was set: the loop then waited on for its next wake-up (an hour, with the tests' resync),
and the operator did not stop (seen as "the operator did not stop" at a test's teardown).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.kit.cachekit import empty_cache
from vgpu_operator.controller.reconciler import Reconciler, ReconcilerOptions
from vgpu_operator.waiting import wait_set


async def cancelled_as_woken(task: asyncio.Task[None], wake: Callable[[], None]) -> bool:
    """Wake the task and cancel it in the same iteration; did it stop?"""
    await asyncio.sleep(0.01)  # the task is waiting now
    wake()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=1)
    if not done:
        task.cancel()  # again, to clean up
        await asyncio.gather(task, return_exceptions=True)
    return bool(done)


async def test_wait_set_reports_set_or_timeout() -> None:
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, 5) is True


async def test_wait_set_keeps_a_cancel_that_meets_the_event() -> None:
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            await wait_set(event, 3600)
            event.clear()

    task = asyncio.create_task(loop())
    assert await cancelled_as_woken(task, event.set)
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_reconciler_stops_when_cancelled_as_work_is_requested() -> None:
    reconciler = Reconciler(
        api=None,  # type: ignore[arg-type]  # cancelled before any pass
        cache=empty_cache(),
        post_event=lambda *_: None,
        options=ReconcilerOptions(resync_seconds=3600),
    )
    task = asyncio.create_task(reconciler.run())
    assert await cancelled_as_woken(task, reconciler.request_full)
    assert reconciler.passes == 0
