"""The node agent's Prometheus metrics (`vgpu-operator agent --metrics-port P`), by Prometheus
conventions: `vgpu_operator_agent_` prefix, base units, `_total` on counters. One agent per
node, so no series carries the node's name: the scrape adds it (the chart's PodMonitor copies
the pod's node name into a `node` label).

- every `nvidia-smi` call (agent.smi), by outcome, its duration, and the calls killed after
  their timeout;
- every action (agent.loop): its duration and its outcome by state and reason;
- the GPUs as the action's last read of the hardware left them (MIG mode per GPU, the GPU and
  compute instances by profile) and the state the node was reported in.

Beside them the scrape has the API client's (`kubeapi.lite`: failed requests, refused
credentials, watch restarts) and the process's own (`exposition_process`: resident memory, CPU
time). Written by `vgpu_operator.exposition` in the text format 0.0.4 (no prometheus_client: the
agent runs on every GPU node, bench/agent_cost.py), served by `vgpu_operator.endpoints`.
"""

from __future__ import annotations

from vgpu_operator import exposition_process
from vgpu_operator.endpoints import Answer
from vgpu_operator.exposition import CONTENT_TYPE, REGISTRY, Counter, Gauge, Histogram
from vgpu_operator.models.inventory import Inventory

SMI_OUTCOMES = ("ok", "error", "timeout", "stuck", "not_run")
STATES = ("success", "failed", "blocked")

SMI_CALLS = Counter(
    "vgpu_operator_agent_nvidia_smi_calls_total",
    "nvidia-smi calls, by outcome (ok; error: a non-zero exit; timeout: killed after its "
    "timeout; stuck: not over even after the kill; not_run: refused while an earlier call is "
    "stuck or the binary could not start)",
    ["outcome"],
)
SMI_TIMEOUTS = Counter(
    "vgpu_operator_agent_nvidia_smi_timeouts_total",
    "nvidia-smi calls killed after their timeout (stuck ones included)",
)
SMI_SECONDS = Histogram(
    "vgpu_operator_agent_nvidia_smi_duration_seconds",
    "Time of one nvidia-smi call, the kill included",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
APPLIES = Counter(
    "vgpu_operator_agent_mig_applies_total",
    "Actions applying the released configuration (MIG mode, GPU and compute instances), by "
    "outcome state and reason (the reason of the node's Event, e.g. Applied, AlreadyApplied, "
    "GpuInUse, RebootRequired, Timeout)",
    ["state", "reason"],
)
APPLY_SECONDS = Histogram(
    "vgpu_operator_agent_mig_apply_duration_seconds",
    "Time of one action applying the released configuration, by outcome state",
    ["state"],
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200),
)
NODE_STATE = Gauge(
    "vgpu_operator_agent_state",
    "The outcome of the agent's last action: 1 for the state reported, 0 for the others",
    ["state"],
)
GPUS = Gauge(
    "vgpu_operator_agent_gpus",
    "GPUs as last read, by model (the NVML name) and MIG mode (enabled, disabled, pending: "
    "a mode change waiting for a reset; n/a: not MIG-capable; unhealthy)",
    ["model", "mig_mode"],
)
MIG_INSTANCES = Gauge(
    "vgpu_operator_agent_mig_instances",
    "MIG GPU instances as last read, by GPU index and profile (e.g. 3g.40gb)",
    ["gpu", "profile"],
)

exposition_process.install(REGISTRY)

for _outcome in SMI_OUTCOMES:  # every series from the start: rate() and the alerts see 0
    SMI_CALLS.labels(outcome=_outcome)
for _state in STATES:
    APPLY_SECONDS.labels(state=_state)
    NODE_STATE.labels(state=_state).set(0)


def smi_call(outcome: str, seconds: float | None) -> None:
    SMI_CALLS.labels(outcome=outcome).inc()
    if outcome in ("timeout", "stuck"):
        SMI_TIMEOUTS.inc()
    if seconds is not None:
        SMI_SECONDS.observe(seconds)


def action_done(state: str, reason: str, seconds: float, inventory: Inventory | None) -> None:
    """One action's outcome (agent.apply.Outcome: its state, its Event reason and the hardware
    it read at the end): counted, timed, and the hardware exported."""
    APPLIES.labels(state=state, reason=reason).inc()
    APPLY_SECONDS.labels(state=state).observe(seconds)
    for known in STATES:
        NODE_STATE.labels(state=known).set(1 if known == state else 0)
    if inventory is None:
        return  # the hardware could not be read: keep what the last read said
    gpus: dict[tuple[str, str], int] = {}
    instances: dict[tuple[str, str], int] = {}
    for gpu in inventory.gpus:
        key = (gpu.name, _mig_mode(gpu.unhealthy, gpu.mig_current, gpu.mig_pending))
        gpus[key] = gpus.get(key, 0) + 1
        for gi in gpu.instances:
            slot = (str(gpu.index), gi.name)
            instances[slot] = instances.get(slot, 0) + 1
    GPUS.clear()
    for (model, mode), n in gpus.items():
        GPUS.labels(model=model, mig_mode=mode).set(n)
    MIG_INSTANCES.clear()
    for (index, profile), n in instances.items():
        MIG_INSTANCES.labels(gpu=index, profile=profile).set(n)


def _mig_mode(unhealthy: str | None, current: bool | None, pending: bool | None) -> str:
    if unhealthy:
        return "unhealthy"
    if current is None:
        return "n/a"
    if pending is not None and pending != current:
        return "pending"
    return "enabled" if current else "disabled"


def page() -> Answer:
    """GET /metrics: every family of the registry (these, the API client's, the process's)."""
    return Answer(200, CONTENT_TYPE, REGISTRY.render())


ROUTES = {"/metrics": page}
