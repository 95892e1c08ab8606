"""What a vGPU memory request of N means in MiB, and where that unit is set. Pure.

`gpuMemoryFactor` is the unit of every pod's `volcano.sh/vgpu-memory` in the cluster: in
hami-core mode HAMi's plugin registers each GPU's MiB / factor and limits a container to
N x factor MiB, and the scheduler's MIG path multiplies the request by it
(volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/mig.go). So a request of N
means N x factor MiB in both. `plan` (a note), `doctor` (rule `gpu-memory-factor`, a note) and
the never-fit warnings on pending pods (`core.volcano.unschedulable`) each say it in the words of
`MemoryUnit.line`, always, not only where the factor is above 1 or changes.

Two readers apply a factor: the plugin (its `--gpu-memory-factor`, else its ConfigMap:
`plugin_memory_unit`) and the scheduler (its device config: `scheduler_memory_unit`). They are
the same ConfigMap in a default install; where they differ, the rule `plugin-config-flags-override`
names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_operator.core.volcano import component_versions
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot

__all__ = ["MemoryUnit", "plugin_memory_unit", "scheduler_memory_unit"]


@dataclass(frozen=True)
class MemoryUnit:
    """The gpuMemoryFactor a component applies, and where it is set, as people find it."""

    factor: int
    source: str

    def line(self, resource: str = "volcano.sh/vgpu-memory") -> str:
        """One sentence: what a request of N of `resource` means."""
        f = self.factor
        return (
            f"{resource}: a request of N means N x {f} MiB (gpuMemoryFactor {f}, from "
            f"{self.source})"
        )

    def example(self, mib: int = 3000) -> str:
        """What a pod written for `mib` MiB asks for, where the factor is above 1 ("" at 1)."""
        f = self.factor
        if f == 1:
            return ""
        return f"a pod written for {mib} MiB asks for {mib} x {f} = {mib * f} MiB"


def plugin_memory_unit(s: ClusterSnapshot) -> MemoryUnit:
    """The factor HAMi's device plugin applies: its `--gpu-memory-factor` when given; up to
    v1.11 its flags override the ConfigMap even when not given (the flag's default, 1:
    `component_versions.plugin_flags_always_override`); else its ConfigMap's `nvidia:` (0 or
    absent counts as 1)."""
    c = s.plugin_container
    ds = f"{s.config.device_plugin.namespace}/{s.config.device_plugin.name}"
    flag = c.flags.get("gpu-memory-factor") if c is not None else None
    if flag is not None and flag.value and flag.value.isdigit():
        return MemoryUnit(max(1, int(flag.value)), f"--gpu-memory-factor of DaemonSet {ds}")
    if (
        c is not None
        and c.version is not None
        and component_versions.plugin_flags_always_override(c.version)
    ):
        return MemoryUnit(
            1,
            f"the default of --gpu-memory-factor: DaemonSet {ds} runs plugin {c.version}, "
            "whose flags override its ConfigMap",
        )
    src = s.plugin_device_config
    n = src.nvidia
    where = f"ConfigMap {src.namespace}/{src.name}"
    if n is None or not n.gpu_memory_factor:
        return MemoryUnit(1, f"the plugin's default: {where} sets none")
    return MemoryUnit(max(1, n.gpu_memory_factor), where)


def scheduler_memory_unit(s: ClusterSnapshot) -> MemoryUnit:
    """The factor the scheduler multiplies a MIG request by: its device config's `nvidia:`
    (0 or absent: 1, the request as it is)."""
    src = s.scheduler_device_config
    where = f"ConfigMap {src.namespace}/{src.name}"
    factor = s.scheduler_nvidia.gpu_memory_factor
    if not factor:
        return MemoryUnit(1, f"the scheduler's default: {where} sets none")
    return MemoryUnit(max(1, factor), where)
