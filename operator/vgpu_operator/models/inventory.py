"""The node inventory the agent reports in `vgpu.volcano.sh/inventory` (contract.ANN_INVENTORY).

What the hardware really has, per GPU: NVML name, uuid, bus id, memory, MIG capability and mode
(current and pending), the supported GPU-instance profiles with their IDs, memory, counts and
placements, and the live GPU and compute instances. The controller validates layouts and builds
`knownMigGeometries` from it; the agent's planner (core.mig.partition) reads it as "observed".

The annotation is compact JSON with sorted keys; running processes are left out of it by default
(they churn, and the annotation would change on every pod start). An 8 x H100 node with every
profile and a full layout stays a few KiB (tested) against the 256 KiB annotation budget.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vgpu_operator.models.node import NodeConfig


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class ProfileInfo(_Model):
    """A GPU-instance profile the GPU supports (`mig -lgip` + `mig -lgipp`)."""

    id: int  # nvidia-smi profile ID, per GPU model (A30 14 is not A100 14)
    name: str  # "1g.10gb", without the "MIG " prefix
    slices: int  # compute slices
    memory_mib: int
    count: int  # instances at most ("Total")
    size: int  # memory slices one instance covers
    placements: list[int] = Field(default_factory=list)  # legal start slices


class ComputeInstance(_Model):
    id: int
    profile_id: int  # compute-instance profile ID (0 = 1 slice, 2 = 3 slices, ...)
    name: str  # "1g.10gb" for a full CI, "1c.3g.20gb" for a partial one
    start: int | None = None
    size: int | None = None


_PARTIAL_CI = re.compile(r"^\d+c\.")  # "1c.3g.20gb": a compute instance of part of a GI


class GpuInstance(_Model):
    id: int
    profile_id: int
    name: str
    start: int
    size: int  # memory slices
    cis: list[ComputeInstance] = Field(default_factory=list)

    @property
    def slices(self) -> int:
        """Compute slices: the G of `<G>g.<GB>gb` (0 when the name has no such prefix)."""
        head = self.name.split("g.", 1)[0]
        return int(head) if head.isdigit() else 0

    @property
    def full(self) -> bool:
        """Exactly one compute instance, and it spans the GPU instance, whatever its profile ID:
        0 for a 1g instance on Ampere, 7 in Hopper's 1g double-memory instances (`-cgi 15 -C` on
        an H100: "using profile MIG 1g.20gb (ID  7)"). A CI spans its GI when its name has no
        `<N>c.` prefix and, where `-lci` prints a placement, it covers every compute slice."""
        if len(self.cis) != 1:
            return False
        ci = self.cis[0]
        if _PARTIAL_CI.match(ci.name):
            return False
        return ci.size is None or not self.slices or ci.size == self.slices


class ProcessInfo(_Model):
    pid: int
    name: str = ""
    used_memory_mib: int | None = None


class GpuInfo(_Model):
    index: int
    uuid: str
    name: str  # NVML name, e.g. "NVIDIA H100 80GB HBM3"
    model: str | None = None  # catalog key when known (models.gpu_catalog), e.g. "H100 80GB HBM3"
    bus_id: str
    memory_mib: int
    mig_capable: bool
    mig_current: bool | None = None  # None: not MIG-capable ([N/A])
    mig_pending: bool | None = None
    profiles: list[ProfileInfo] = Field(default_factory=list)
    # "driver": read from -lgip/-lgipp; "catalog": the driver listed none, taken from the table.
    profiles_source: Literal["driver", "catalog", "none"] = "none"
    instances: list[GpuInstance] = Field(default_factory=list)
    processes: list[ProcessInfo] = Field(default_factory=list)
    # Why the GPU is unhealthy: an nvidia-smi call on it could not be ended (stuck in the driver).
    unhealthy: str | None = None

    def profile(self, key: str | int) -> ProfileInfo | None:
        for p in self.profiles:
            if (isinstance(key, int) and p.id == key) or p.name == key:
                return p
        return None

    @property
    def mode_settled(self) -> bool:
        return self.mig_current == self.mig_pending


class Inventory(_Model):
    """Everything the agent observed on its node."""

    gpus: list[GpuInfo] = Field(default_factory=list)
    # The hardware part of the configuration the agent last applied successfully, so a restarted
    # agent still knows whether a dynamic configuration is a switch into dynamic mode
    # (core.mig.partition).
    applied: NodeConfig | None = None
    error: str | None = None  # why observation was incomplete, if it was

    def gpu(self, index: int) -> GpuInfo | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def to_annotation(self, *, include_processes: bool = False) -> str:
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        for gpu in data["gpus"]:
            if not include_processes:
                gpu.pop("processes", None)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, raw: str | None) -> Inventory | None:
        if not raw:
            return None
        return cls.model_validate_json(raw)
