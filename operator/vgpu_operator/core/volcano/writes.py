"""The write plan of a configuration pass: every write the operator makes to a Volcano/HAMi object,
decided once, typed, with the exact body it sends. Pure.

`plan_writes(snapshot, now, ledger, settings)` returns, in the order `enforce` sends them:
1. the ConfigMaps (device config, node configs, scheduler conf), each a create (the whole
   object) or a JSON merge PATCH carrying the resourceVersion it was rendered from, with the
   unified diff `plan` shows;
2. one strategic merge PATCH per HAMi plugin DaemonSet: its args (plugin <= v1.11) and its
   placement, with the placement record and the resourceVersion; it restarts the pods, so it
   waits (`due`) until what the plugin reads has settled and, for a placement change, for the
   restart limits (`core.volcano.restarts.rollout_due`);
3. the restarts the planner asks for on the cluster as these writes leave it
   (`core.volcano.restarts.plan_restarts`), due now or later.

Three interpreters read the same plan: enforce sends what is due now (`controller.volcano_writes`),
`plan` prints and diffs it (`core.plan`, `commands.plan`), and observe mode reports it
(`core.observe`). Nothing is rendered to text and parsed back.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from vgpu_operator.core.nodes.status import change_stamp
from vgpu_operator.core.volcano.configmap_writes import configmaps, released_configs
from vgpu_operator.core.volcano.restarts import RestartSettings
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.workload_writes import (
    on_delete_pods,
    restart_body,
    restarts,
    workload_patches,
)
from vgpu_operator.core.volcano.write_plan import (
    ConfigMapWrite,
    Restart,
    WorkloadPatch,
    WritePlan,
)

__all__ = [
    "ConfigMapWrite",
    "Restart",
    "WorkloadPatch",
    "WritePlan",
    "installed",
    "on_delete_pods",
    "plan_writes",
    "released_configs",
    "restart_body",
    "workload_patches",
]


def installed(s: ClusterSnapshot) -> bool:
    """Volcano or the HAMi plugin is there: otherwise nobody reads what the operator renders,
    and it creates nothing."""
    return s.scheduler_cm is not None or s.plugin is not None or s.ascend_plugin is not None


def plan_writes(
    s: ClusterSnapshot,
    now: datetime,
    ledger: Mapping[str, datetime] | None = None,
    settings: RestartSettings | None = None,
) -> WritePlan:
    """Every write a configuration pass in enforce mode makes to the cluster `s` at `now`, given
    the restarts so far (`ledger`) and their limits (`settings`). Nothing when neither Volcano
    nor HAMi's plugin is installed: nobody would read it."""
    if not installed(s):
        return WritePlan(after=s)
    ledger = ledger or {}
    settings = settings or RestartSettings()
    notes: list[str] = []
    after, cms = configmaps(s, change_stamp(now), notes)
    after, patches = workload_patches(after, cms, ledger, settings, now)
    return WritePlan(
        configmaps=tuple(cms),
        workloads=tuple(patches),
        restarts=tuple(restarts(after, patches, ledger, settings, now)),
        notes=tuple(notes),
        after=after,
    )
