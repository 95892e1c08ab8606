"""Per node: the desired state and the one PATCH that closes the difference (or none).

Semantics (docs/architecture.md, the node contract):
- an owned node gets the policy's labels and taints (`spec.effective_labels()/effective_taints()`),
  `vgpu.volcano.sh/policy`, `/mode` and `/device-plugin` (which HAMi plugin must run there), the
  ownership record `/owned`, the desired configuration `/target` and the released one `/config`
  (`release()`: at once, or through the rollout's step, `core.rollout.decide`);
- the operator changes or removes only what its record says it set, and only while the value is
  still the recorded one; a label or taint of a user is never removed or overwritten (a wanted
  label or taint colliding with a user's is refused before this, `core.nodes.planner.plan_node`);
- the exceptions are the GPU Operator's `nvidia.com/gpu.deploy.device-plugin` under
  `disableNvidiaDevicePlugin` and `nvidia.com/gpu.deploy.mig-manager` under
  `disableNvidiaMigManager`: set to "false", the user's earlier value kept in `Owned.replaced`
  and put back when the node leaves the pool (or the option is turned off);
- a node no policy owns loses the operator's labels, taints, policy/mode labels, target and
  record; its `config` stays as `{mode: whole-gpu}` when it was `mig`, so the agent turns MIG off;
- a wanted label or taint the node already has with the same value is no collision and no write;
  it is recorded as the operator's only under `adoptExisting` (`core.nodes.adoption`), and then
  with the user's value in `Owned.replaced` / `replacedTaints`: put back, never removed, when the
  node leaves (decided from the record alone, whatever the operator saw happen);
- the record carries the policy's `onDelete` when it is `Retain` or set explicitly, so the node
  keeps that choice if its policy vanishes without the operator's finalizer pass
  (`core.nodes.adoption.retains`);
- a recorded label or taint this version may no longer own (`core.nodes.facts.disowned_entries`)
  is released like any other: removed while unchanged and dropped from the record; one it may
  never act on (Kubernetes' own keys) is only dropped from the record.

The PATCH is a JSON merge patch with `metadata.resourceVersion` (optimistic concurrency); when
taints change it carries the whole `spec.taints` list, every taint the operator does not own kept
verbatim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts, TaintKey, taint_key, taint_value
from vgpu_operator.core.nodes.ownership import label_is_ours, taint_is_ours
from vgpu_operator.core.nodes.step import NodeStep
from vgpu_operator.models.labels import system_key
from vgpu_operator.models.node import GPU_OPERATOR_MIG_MANAGER_LABEL, NodeConfig, Owned
from vgpu_operator.models.policy import Taint, VGPUNodePolicy

__all__ = ["PARKED", "Desired", "desired_for", "diff", "parked_config", "release"]

DP_LABEL = contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL
MM_LABEL = GPU_OPERATOR_MIG_MANAGER_LABEL


@dataclass(frozen=True)
class Desired:
    """What one node should carry; `owner=None` means: in no pool."""

    owner: str | None = None
    mode: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    disable_device_plugin: bool = False
    disable_mig_manager: bool = False
    target: NodeConfig | None = None
    target_text: str | None = None  # the annotation text of `target`
    adopt: bool = False  # spec.adoptExisting: labels/taints already there are recorded as ours
    # spec.onDelete (the operator config's default applied by the reconciler), recorded
    on_delete: Literal["Delete", "Retain"] | None = None


def desired_for(policy: VGPUNodePolicy | None) -> Desired:
    if policy is None:
        return Desired()
    spec = policy.spec
    target = NodeConfig(
        mode=spec.mode,
        policy=policy.name,
        generation=policy.generation,
        hami_core=spec.hami_core,
        ascend_vnpu=spec.ascend_vnpu,
        mig=spec.effective_mig(),
    )
    return Desired(
        owner=policy.name,
        mode=spec.mode,
        labels=spec.effective_labels(),
        taints=tuple(spec.effective_taints()),
        disable_device_plugin=spec.disable_nvidia_device_plugin,
        disable_mig_manager=spec.disable_nvidia_mig_manager,
        target=target,
        target_text=target.to_annotation(),
        adopt=spec.adopt_existing,
        on_delete=spec.on_delete,
    )


def release(
    target: NodeConfig, current: NodeConfig | None, step: NodeStep | None = None
) -> NodeConfig | None:
    """The configuration released to the node (what the agent applies). A node the rollout
    (`core.rollout.decide`) has a step for gets the step's configuration, or keeps the one it has
    (none, for a first configuration the gate holds) until the step releases it; any other node
    gets `target` at once (no change the rollout must pace)."""
    if step is None:
        return target
    if step.config is not None:
        return step.config
    return current


PARKED = NodeConfig(mode="whole-gpu")
_PARKED_TEXT = PARKED.to_annotation()


def parked_config(current: NodeConfig | None) -> NodeConfig | None:
    """`config` of a node in no pool: `{mode: whole-gpu}` if its GPUs were in MIG mode (mode
    mig, or a dra pool's MIG: the agent turns MIG off; kept from then on), otherwise none."""
    if current is not None and (
        current.gpu_mig is not None or _config_text(current) == _PARKED_TEXT
    ):
        return PARKED
    return None


@dataclass
class _Changes:
    labels: dict[str, str | None] = field(default_factory=dict)
    taints: list[dict[str, Any]] | None = None
    taints_changed: bool = False
    annotations: dict[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None  # the cordon to set (None: leave it)

    def only_record(self) -> bool:
        """The one change is dropping the ownership record."""
        return self.annotations == {contract.ANN_OWNED: None} and not (
            self.labels or self.taints_changed or self.unschedulable is not None
        )

    def patch(self, facts: NodeFacts) -> dict[str, Any] | None:
        if not (
            self.labels or self.taints_changed or self.annotations or self.unschedulable is not None
        ):
            return None
        metadata: dict[str, Any] = {"resourceVersion": facts.resource_version}
        if self.labels:
            metadata["labels"] = dict(sorted(self.labels.items()))
        if self.annotations:
            metadata["annotations"] = dict(sorted(self.annotations.items()))
        body: dict[str, Any] = {"metadata": metadata}
        if self.taints_changed:
            body["spec"] = {"taints": self.taints}
        if self.unschedulable is not None:
            body.setdefault("spec", {})["unschedulable"] = self.unschedulable
        return body


def _taint_dict(taint: Taint) -> dict[str, Any]:
    out: dict[str, Any] = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    return out


def _plan_labels(
    facts: NodeFacts, want: Desired, out: _Changes, plugin: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    """Label changes into `out`; returns the new record's labels and replaced values (a user's
    value the operator overwrote, or adopted: what the node gets back when it leaves)."""
    owned: dict[str, str] = {}
    replaced: dict[str, str] = {}

    def record(key: str, value: str, ours: bool, current: str | None) -> None:
        owned[key] = value
        if ours and key in facts.owned.replaced:
            replaced[key] = facts.owned.replaced[key]
        elif not ours and current is not None:
            replaced[key] = current  # the user's, before the operator took it over

    for key, value in want.labels.items():
        current = facts.labels.get(key)
        ours = label_is_ours(facts, key)
        if current != value:
            out.labels[key] = value
        if current != value or ours or want.adopt:
            record(key, value, ours, current)
    switches = ((want.disable_device_plugin, DP_LABEL), (want.disable_mig_manager, MM_LABEL))
    for key in (label for wanted, label in switches if wanted):
        current = facts.labels.get(key)
        ours = label_is_ours(facts, key)
        if current != "false" or ours:
            record(key, "false", ours, current)
        if current != "false":
            out.labels[key] = "false"
    for key, recorded in facts.owned.labels.items():
        current = facts.labels.get(key)
        if key in owned or current != recorded or key in want.labels:
            continue  # still wanted, already gone, taken over by someone, or now the user's
        if system_key(key):
            continue  # never Kubernetes' own (core.nodes.facts keeps none in the record)
        restore = facts.owned.replaced.get(key)
        if restore != current:
            out.labels[key] = restore  # removed, or the user's earlier value put back
    operator_labels: dict[str, str | None] = {
        contract.LABEL_POLICY: want.owner,
        contract.LABEL_MODE: want.mode,
        # the plugin DaemonSets select on it (workload_writes' placement patch): the plugin of
        # the released configuration, none while the rollout pauses it
        contract.LABEL_DEVICE_PLUGIN: plugin,
    }
    for key, wanted in operator_labels.items():
        if facts.labels.get(key) != wanted:
            out.labels[key] = wanted
    return owned, replaced


def _plan_taints(facts: NodeFacts, want: Desired, out: _Changes) -> tuple[list[Taint], list[Taint]]:
    """Taint changes into `out`; returns the new record's taints and replaced taints (a user's
    taint adopted with the same key and effect: put back as it was when the node leaves)."""
    current = facts.taint_map()
    owned: list[Taint] = []
    replaced: list[Taint] = []
    before: dict[TaintKey, Taint] = {(t.key, t.effect): t for t in facts.owned.replaced_taints}
    add: list[Taint] = []
    swap: dict[TaintKey, Taint] = {}
    wanted_keys: set[TaintKey] = {(t.key, t.effect) for t in want.taints}
    key: TaintKey
    for taint in want.taints:
        key = (taint.key, taint.effect)
        existing = current.get(key)
        ours = taint_is_ours(facts, key)
        if existing is None:
            add.append(taint)
        elif taint_value(existing) != taint.value:
            swap[key] = taint
        if existing is None or taint_value(existing) != taint.value or ours or want.adopt:
            owned.append(taint)
            if ours and key in before:
                replaced.append(before[key])
            elif not ours and existing is not None:
                replaced.append(Taint(key=key[0], value=taint_value(existing), effect=key[1]))
    remove: set[TaintKey] = set()
    for recorded in facts.owned.taints:
        key = (recorded.key, recorded.effect)
        if (
            key not in wanted_keys
            and key in current
            and taint_value(current[key]) == recorded.value
        ):
            if key not in before:
                remove.add(key)  # ours, unchanged, no longer wanted
            elif before[key].value != recorded.value:
                swap[key] = before[key]  # the user's taint, as it was before
    if add or swap or remove:
        kept: list[dict[str, Any]] = []
        for raw in facts.taints:
            key = taint_key(raw)
            if key in remove:
                continue
            kept.append(_taint_dict(swap[key]) if key in swap else dict(raw))
        kept.extend(_taint_dict(t) for t in add)
        out.taints = kept or None
        out.taints_changed = True

    def order(t: Taint) -> TaintKey:
        return (t.key, t.effect)

    return sorted(owned, key=order), sorted(replaced, key=order)


def _canonical_owned(owned: Owned) -> str:
    ordered = Owned(
        labels=dict(sorted(owned.labels.items())),
        taints=sorted(owned.taints, key=lambda t: (t.key, t.effect)),
        replaced=dict(sorted(owned.replaced.items())),
        replaced_taints=sorted(owned.replaced_taints, key=lambda t: (t.key, t.effect)),
        on_delete=owned.on_delete,
    )
    return ordered.to_annotation()


def _config_text(config: NodeConfig | None) -> str | None:
    return config.to_annotation() if config is not None else None


def _same(raw: str | None, parsed_text: Callable[[], str | None], wanted: str | None) -> bool:
    """Whether an annotation already says `wanted`: the same text, or the same content."""
    if raw == wanted:
        return True
    if raw is None or wanted is None:
        return False
    return parsed_text() == wanted


def diff(
    facts: NodeFacts,
    want: Desired,
    step: NodeStep | None = None,
    *,
    paced: bool = False,
    hold_config: bool = False,
) -> dict[str, Any] | None:
    """The merge patch taking `facts` to `want` (None when it already matches). Collisions are
    not checked here: `plan_node` refuses to write when there are any. `paced`: the rollout
    decided this pass (`step` is its step for the node, None: it has none), so the node's
    `vgpu.volcano.sh/rollout` annotation is the step's. `hold_config`: the released `config`
    stays as the node has it (none stays none), whatever the target or the step says
    (`core.nodes.gpu_owners.layout_held`); the rest is written as usual."""
    out = _Changes()
    config: NodeConfig | None
    if want.target is not None:
        config = facts.config if hold_config else release(want.target, facts.config, step)
        config_text = want.target_text if config is want.target else _config_text(config)
    else:
        config = parked_config(facts.config)
        config_text = _config_text(config)
    paused = step is not None and step.plugin_paused
    plugin = config.device_plugin if want.target is not None and config and not paused else None
    labels, replaced = _plan_labels(facts, want, out, plugin)
    taints, replaced_taints = _plan_taints(facts, want, out)
    record = Owned(
        labels=labels,
        taints=taints,
        replaced=replaced,
        replaced_taints=replaced_taints,
        on_delete=want.on_delete,
    )
    record_text = None if record == Owned() else record.to_annotation()
    checks = [
        (contract.ANN_OWNED, record_text, lambda: _canonical_owned(facts.owned)),
        (contract.ANN_TARGET, want.target_text, lambda: _config_text(facts.target)),
        (contract.ANN_CONFIG, config_text, lambda: _config_text(facts.config)),
    ]
    if paced and not (step is not None and step.keep_rollout):
        rollout = step.rollout.to_annotation() if step is not None and step.rollout else None
        checks.append((contract.ANN_ROLLOUT, rollout, lambda: None))
    disowned = bool(facts.disowned)  # the record lists what it may not: dropped now
    for key, wanted, current in checks:
        stale = key == contract.ANN_OWNED and disowned and key in facts.annotations
        if stale or key in facts.errors or not _same(facts.annotations.get(key), current, wanted):
            out.annotations[key] = wanted
    if want.owner is not None and contract.ANN_RETAINED in facts.annotations:
        out.annotations[contract.ANN_RETAINED] = None  # managed again (core.nodes.adoption)
    if want.owner is None and disowned and facts.owned == Owned() and out.only_record():
        return None  # a node in no pool whose record names nothing it may act on: no write
    if step is not None:
        for key, value in step.labels.items():
            if key not in out.labels and facts.labels.get(key) != value:
                out.labels[key] = value
        if step.unschedulable is not None and step.unschedulable != facts.unschedulable:
            out.unschedulable = step.unschedulable
    return out.patch(facts)
