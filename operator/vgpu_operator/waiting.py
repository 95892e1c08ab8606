"""Waiting for an asyncio.Event with a timeout, without losing a cancellation.

Python 3.11's `asyncio.wait_for` swallows a cancellation that arrives in the same loop iteration
as the awaited event is set (fixed in 3.12, where wait_for is built on `asyncio.timeout`). A loop
that waits for its wake-up event with it can then miss the cancel of a shutdown and wait on, so
the operator never stops. `asyncio.timeout` keeps the cancellation.
"""

from __future__ import annotations

import asyncio


async def wait_set(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set (True) or `timeout` seconds have passed (False)."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
