"""Before the agent destroys or resets anything, it asks the kubelet which devices pods hold.

`PodResourcesGuard.check(driver, gpu, steps)` runs before a GPU's steps when they destroy a
GPU instance, change MIG mode or reset the GPU (agent.allocations `touched`): one PodResources
`List` on the kubelet's socket (default /var/lib/kubelet/pod-resources/kubelet.sock, the
kubelet's `podresources` endpoint; the chart mounts its directory read-only), then
`nvidia-smi -L` to map device IDs to GPUs and MIG devices. A pod holding the GPU, one of the
instances destroyed, or a GPU-backed device that cannot be mapped: `Refused(blocked=True)`,
naming the pods, and nothing is touched. The kubelet cannot be asked (no socket, no answer, an
answer that cannot be read): `Refused(blocked=False)`, nothing is touched either.

The call runs in a process of its own (agent.podresources_call: gRPC is imported only there),
in a session of its own, killed with its group when it overruns its bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from vgpu_operator.agent.allocations import Holder, holders, touched
from vgpu_operator.agent.podresources_wire import (
    DEFAULT_SOCKET,
    DEFAULT_TIMEOUT,
    Allocation,
    WireError,
    decode_list_response,
)
from vgpu_operator.agent.smi import NvidiaSmi, SmiError
from vgpu_operator.core.mig.partition import Step
from vgpu_operator.models.inventory import GpuInfo

STARTUP = 20.0  # seconds more for the helper process to start (importing gRPC) and end
KILL_GRACE = 5.0


class KubeletError(Exception):
    """The kubelet's allocations could not be read."""


class Refused(Exception):
    """The GPU's steps must not run: `blocked` (pods hold it) or not (cannot tell)."""

    def __init__(self, blocked: bool, message: str, holders: tuple[Holder, ...] = ()) -> None:
        super().__init__(message)
        self.blocked, self.message, self.holders = blocked, message, holders


async def list_pod_resources(socket: str, timeout: float = DEFAULT_TIMEOUT) -> list[Allocation]:
    """One PodResources `List` through agent.podresources_call; raises KubeletError."""
    argv = (sys.executable, "-m", "vgpu_operator.agent.podresources_call", socket, f"{timeout}")
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:
        raise KubeletError(f"cannot start the PodResources call: {e}") from e
    io = asyncio.ensure_future(proc.communicate())
    try:
        done, _ = await asyncio.wait({io}, timeout=timeout + STARTUP)
    finally:
        if not io.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.wait({io}, timeout=KILL_GRACE)
    if not done:
        raise KubeletError(f"the kubelet's PodResources List gave no answer in {timeout:g}s")
    out, err = io.result()
    if proc.returncode != 0:
        text = err.decode(errors="replace").strip() or f"exit code {proc.returncode}"
        raise KubeletError(f"the kubelet's PodResources List failed: {text.splitlines()[-1]}")
    try:
        return decode_list_response(out)
    except WireError as e:
        raise KubeletError(f"the kubelet's PodResources answer cannot be read: {e}") from e


Lister = Callable[[str, float], Awaitable[list[Allocation]]]


@dataclass(frozen=True)
class PodResourcesGuard:
    socket: str = DEFAULT_SOCKET
    timeout: float = DEFAULT_TIMEOUT
    lister: Lister = field(default=list_pod_resources, compare=False)

    async def check(self, driver: NvidiaSmi, gpu: GpuInfo, steps: Iterable[Step]) -> None:
        """Raise Refused when the steps must not run on this GPU; return when they may."""
        touch = touched(steps)
        if touch is None:
            return
        try:
            allocations = await self.lister(self.socket, self.timeout)
        except KubeletError as e:
            raise Refused(False, f"GPU {gpu.index}: {e}; nothing was changed on it") from e
        if not allocations:
            return
        try:
            listed = await driver.list_devices()
        except SmiError as e:
            message = f"GPU {gpu.index}: cannot map the kubelet's devices: {e}"
            raise Refused(False, f"{message}; nothing was changed on it") from e
        held = holders(allocations, gpu, touch, listed)
        if held:
            what = "its MIG mode or a reset" if touch.whole else "the GPU instances destroyed"
            names = "; ".join(str(h) for h in held)
            raise Refused(
                True,
                f"GPU {gpu.index} is allocated to pods by the kubelet ({what} would take it "
                f"from them): {names}; nothing was changed on it",
                tuple(held),
            )
