"""What one action of the agent ends in: per GPU and for the node (agent.apply makes them; the
loop reports them: the state label, the inventory, an Event named after the reason)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from vgpu_operator.models.inventory import Inventory, ProcessInfo

__all__ = ["GpuOutcome", "Outcome", "Reason", "State"]


class Reason(StrEnum):
    APPLIED = "applied"
    UNCHANGED = "already applied"
    NO_CONFIG = "no configuration"
    INVALID = "invalid configuration"
    NOT_MIG_CAPABLE = "not MIG-capable"
    # a static layout on a GPU model the catalog does not confirm: the Event reason is the
    # controller's for the node (core.nodes.node_hardware.UNCONFIRMED_MODEL)
    UNCONFIRMED = "unconfirmed mig model"
    IN_USE = "GPU in use"
    REBOOT_REQUIRED = "reboot required"
    RESET_REFUSED = "reset refused"
    HELD = "held by another client"
    INSUFFICIENT = "insufficient resources"
    TIMEOUT = "timeout"
    UNHEALTHY = "GPU unhealthy"
    MIG_MANAGER = "another MIG manager"
    VERIFY = "verification failed"
    SMI = "nvidia-smi error"
    OBSERVE = "cannot read the GPUs"
    KUBELET = "kubelet allocations unreadable"
    INTERNAL = "internal error"


State = Literal["success", "failed", "blocked"]


@dataclass(frozen=True)
class GpuOutcome:
    index: int
    state: State
    reason: Reason
    message: str = ""
    steps_done: int = 0
    processes: tuple[ProcessInfo, ...] = ()


@dataclass(frozen=True)
class Outcome:
    state: State
    reason: Reason
    message: str
    gpus: tuple[GpuOutcome, ...] = ()
    inventory: Inventory | None = None  # the hardware at the end (None: could not be read)
    steps_done: int = 0

    @property
    def event_reason(self) -> str:
        """CamelCase for a Kubernetes Event: `reboot required` -> `RebootRequired`."""
        return "".join(w[:1].upper() + w[1:] for w in self.reason.replace("-", " ").split())

    @property
    def processes(self) -> tuple[tuple[int, ProcessInfo], ...]:
        return tuple((g.index, p) for g in self.gpus for p in g.processes)
