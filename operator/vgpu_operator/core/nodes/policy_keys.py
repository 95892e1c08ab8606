"""Which node label and taint keys a policy may ask for: those the operator config's `policyKeys`
lists (`models.policy_keys`; the chart renders the same value into the admission policy that
holds the controller's node writes to it). Pure; the controller, `plan`, `validate` and
`doctor` all decide with `unlisted_keys`.

A policy that asks for a key outside the list (in `spec.nodeLabels`, `spec.nodeTaints`, or its
mode's default labels and taints) is refused as a whole, as a change the device plugin cannot
apply is (`ParsedPolicy.refused`, `core.volcano.plugin_refusal`): held as if suspended, so none
of its changes is made (its nodes keep what they carry, a node newly selected waits) and the
rest of the cluster proceeds. A user expects a policy to apply all or nothing: half a pool's
labels without its taint would let pods in that the taint was meant to keep out. A policy being
deleted is never refused: it only removes, and removing a label or taint the node's ownership
record lists needs no entry (the admission policy reads the record), so narrowing the list
releases what was set under it once the policies no longer ask for it.

Unset `policyKeys` (a configuration the chart did not render): nothing is refused here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vgpu_operator import contract
from vgpu_operator.core.nodes.step import OPERAND_LABELS
from vgpu_operator.core.nodes.validate import ParsedPolicy, Problem
from vgpu_operator.models.policy import VGPUNodePolicy
from vgpu_operator.models.policy_keys import PolicyKeys

__all__ = [
    "GPU_OPERATOR_SWITCHES",
    "KEY_NOT_LISTED",
    "OPERATOR_NODE_ANNOTATIONS",
    "OPERATOR_NODE_LABELS",
    "key_listed",
    "refuse_unlisted",
    "unlisted_keys",
]

KEY_NOT_LISTED = "PolicyKeyNotListed"  # the refusal's reason (status, Event, findings)
CHART_VALUE = "config.policyKeys"  # where the list is set (charts/vgpu-operator/values.yaml)

# What the controller writes on a Node besides the policies' keys, needing no entry: the node
# contract's labels and annotations it sets (the agent's and a person's are not among them), and
# the GPU Operator's per-node switches (`disableNvidiaDevicePlugin`, `disableNvidiaMigManager`,
# the operands a MIG change pauses: `core.nodes.step`). The chart's admission policy lists the
# same keys (charts/vgpu-operator/templates/_nodekeys.tpl; a unit test holds them equal).
OPERATOR_NODE_LABELS = (contract.LABEL_POLICY, contract.LABEL_MODE, contract.LABEL_DEVICE_PLUGIN)
OPERATOR_NODE_ANNOTATIONS = (
    contract.ANN_OWNED,
    contract.ANN_TARGET,
    contract.ANN_CONFIG,
    contract.ANN_ROLLOUT,
    contract.ANN_RETAINED,
)
GPU_OPERATOR_SWITCHES = tuple(
    sorted(
        {
            contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL,
            contract.GPU_OPERATOR_MIG_MANAGER_LABEL,
            *OPERAND_LABELS,
        }
    )
)


def key_listed(key: str, listed: Sequence[str]) -> bool:
    """`key` is an entry of `listed`, or under one of its prefixes (entries ending in `/`)."""
    return any(key == entry or (entry.endswith("/") and key.startswith(entry)) for entry in listed)


def _prefix_of(key: str) -> str | None:
    prefix, slash, _ = key.rpartition("/")
    return f"{prefix}/" if slash else None


def _refusal(
    policy: str, kind: str, key: str, field: str, listed: Sequence[str], default: bool
) -> Problem:
    plural = f"{kind}s"
    where = f"the mode's default {plural} (spec.{field} unset)" if default else f"spec.{field}"
    shown = ", ".join(listed) if listed else "nothing"
    prefix = _prefix_of(key)
    entry = f"{key} (or its prefix {prefix})" if prefix else key
    return Problem(
        field=f"spec.{field}",
        reason=KEY_NOT_LISTED,
        message=f"policy {policy} asks for the {kind} key {key} ({where}), which the operator "
        f"config's policyKeys.{plural} does not list ({shown}); the policy is refused: none of "
        "its changes is made, its nodes keep what they carry",
        fix=f"add {entry} to the chart value {CHART_VALUE}.{plural} (helm upgrade; the "
        "admission policy and the operator read the same list), or use a listed key in "
        f"spec.{field}",
    )


def unlisted_keys(policy: VGPUNodePolicy, keys: PolicyKeys) -> list[Problem]:
    """One problem per label or taint key the policy asks for that `keys` does not list."""
    spec = policy.spec
    problems = [
        _refusal(policy.name, "label", key, "nodeLabels", keys.labels, spec.node_labels is None)
        for key in sorted(spec.effective_labels())
        if not key_listed(key, keys.labels)
    ]
    taint_keys = sorted({t.key for t in spec.effective_taints()})
    problems += [
        _refusal(policy.name, "taint", key, "nodeTaints", keys.taints, spec.node_taints is None)
        for key in taint_keys
        if not key_listed(key, keys.taints)
    ]
    return problems


def refuse_unlisted(
    policies: Iterable[ParsedPolicy], keys: PolicyKeys | None
) -> list[ParsedPolicy]:
    """The policies, each one asking for an unlisted key marked refused (its refusals added to
    any it has); a policy being deleted, or invalid, is left as it is; `keys` None: all as
    they are."""
    if keys is None:
        return list(policies)
    listed = keys
    return [p.refuse_for(lambda policy: unlisted_keys(policy, listed)) for p in policies]
