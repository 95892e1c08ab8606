"""Verify: does what the GPUs report after an apply match the target? Pure.

The agent reads the hardware back after every apply and reports success only when this returns
no difference (never on a write alone: HAMi #2131, NVIDIA/mig-parted#18 "applied successfully"
while no instances existed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from vgpu_operator.core.mig.layout import GpuTarget, resolve_targets
from vgpu_operator.models.inventory import GpuInfo, Inventory
from vgpu_operator.models.node import NodeConfig


@dataclass(frozen=True)
class Difference:
    gpu: int
    what: str
    expected: str
    observed: str

    def __str__(self) -> str:
        return f"GPU {self.gpu}: {self.what}: expected {self.expected}, observed {self.observed}"


def _mode(value: bool | None) -> str:
    return {True: "Enabled", False: "Disabled", None: "[N/A]"}[value]


def _counts(counter: Counter[str] | dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(counter.items())) + "}"


def verify_gpu(target: GpuTarget, gpu: GpuInfo | None) -> list[Difference]:
    """Differences between one GPU and its target (empty: the GPU is right)."""
    i = target.index
    if gpu is None:
        return [Difference(i, "GPU", "present", "missing")]
    out: list[Difference] = []
    if target.mig is not None:
        if gpu.mig_current != target.mig:
            out.append(Difference(i, "MIG mode", _mode(target.mig), _mode(gpu.mig_current)))
        if gpu.mig_pending != target.mig:
            out.append(Difference(i, "pending MIG mode", _mode(target.mig), _mode(gpu.mig_pending)))
    if target.mig is not True or not gpu.mig_current:
        return out
    if target.clear and gpu.instances:
        names = Counter(gi.name for gi in gpu.instances)
        out.append(Difference(i, "instances", "none", _counts(names)))
    if target.profiles is not None:
        have = Counter(gi.name for gi in gpu.instances)
        want = {k: v for k, v in target.profiles.items() if v}
        if dict(have) != want:
            out.append(Difference(i, "instances", _counts(want), _counts(have)))
        for gi in gpu.instances:
            if not gi.full:  # one CI spanning the GI, whatever its profile ID (GpuInstance.full)
                seen = ", ".join(ci.name for ci in gi.cis) or "none"
                out.append(
                    Difference(i, f"compute instances of GPU instance {gi.id}", "one full CI", seen)
                )
    return out


def verify(
    observed: Inventory,
    desired: NodeConfig | None,
    previous: NodeConfig | None,
    *,
    skip: Collection[int] = (),
) -> list[Difference]:
    """Differences between the node and `desired` for every GPU not in `skip` (e.g. blocked)."""
    targets, errors, _ = resolve_targets(observed, desired, previous)
    if errors:
        return [Difference(-1, "configuration", "valid", str(e)) for e in errors]
    out: list[Difference] = []
    for target in targets:
        if target.index not in skip:
            out += verify_gpu(target, observed.gpu(target.index))
    return out
