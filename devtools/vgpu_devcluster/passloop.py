"""The loop the simulated plugin processes run in (HAMi's device plugin, `pluginsim`; the DRA
driver's kubelet plugin, `dra_kubelet`): one pass, a pause, the next pass, in a task of its own
until stopped. A pass that fails is logged and the next one runs, as a plugin process keeps
serving after one failed call to the apiserver."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass
class PassLoop:
    """`start()` runs `sync` in a task named `name`, pausing `interval()` seconds (read anew
    after each pass) between passes; `await stop()` cancels it."""

    sync: Callable[[], Awaitable[object]]
    interval: Callable[[], float]
    name: str
    log: logging.Logger
    what: str  # for the log: "<what> pass failed"
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("%s pass failed", self.what)
            await asyncio.sleep(self.interval())
