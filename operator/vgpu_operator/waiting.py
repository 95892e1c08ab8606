"""Waiting for an asyncio.Event with a timeout, without losing a cancellation.

Python 3.11's `asyncio.wait_for` swallows a cancellation that arrives in the same loop iteration
as the awaited event is set (fixed in 3.12, where wait_for is built on `asyncio.timeout`). A loop
that waits for its wake-up event with it can then miss the cancel of a shutdown and wait on, so
the operator never stops. `asyncio.timeout` keeps the cancellation.

`run_passes` is the loop of both reconcilers, built on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("vgpu_operator.passes")


async def wait_set(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set (True) or `timeout` seconds have passed (False)."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


PassFn = Callable[[bool], Awaitable[bool]]


async def run_passes(
    wake: asyncio.Event,
    do_pass: PassFn,
    *,
    debounce: float,
    resync: float,
    retry: float,
    min_interval: float = 0.0,
    before: Callable[[], Awaitable[None]] | None = None,
    name: str = "pass",
) -> None:
    """The loop both reconcilers run: wait for `wake` (or the resync), gather the burst for
    `debounce` seconds (and keep passes `min_interval` apart), let `before` hold the pass back
    if it must, then `do_pass(resync)`. `do_pass` returns True when it was a full pass (the
    resync clock starts again). A failed pass is logged and tried again after `retry` seconds.
    """
    last_full = time.monotonic()
    last_pass = -float("inf")
    while True:
        timeout = max(0.0, resync - (time.monotonic() - last_full))
        resynced = not await wait_set(wake, timeout)
        await asyncio.sleep(max(debounce, min_interval - (time.monotonic() - last_pass)))
        if before is not None:
            await before()
        wake.clear()
        last_pass = time.monotonic()
        try:
            if await do_pass(resynced):
                last_full = time.monotonic()
        except Exception:
            log.exception("%s failed; again in %gs", name, retry)
            await asyncio.sleep(retry)
            wake.set()
