"""`core.cleanup_nodes`: cleanup honours each policy's onDelete and never strips a node under
running GPU pods unless forced."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.kit.nodekit import (
    annotations_of,
    apply,
    labels_of,
    node,
    policy,
    reconcile,
    taints_of,
)
from vgpu_operator import contract
from vgpu_operator.core.cleanup_nodes import node_outcome, retained_policies, retaining_node
from vgpu_operator.core.nodes.step import PAUSED_VALUE
from vgpu_operator.models.rollout import NodeRollout

POOL = {"matchLabels": {"pool": "a"}}
HAMI = {"mode": "hami-core", "nodeSelector": POOL}
DCGM = "nvidia.com/gpu.deploy.dcgm"


def configured() -> dict[str, Any]:
    (out,), _plan = reconcile([node("n1", labels={"pool": "a"})], [policy("p", HAMI)])
    assert labels_of(out)[contract.LABEL_POLICY] == "p"
    return out


def test_retained_policies_take_the_operator_config_default() -> None:
    raw = [policy("own", {**HAMI, "onDelete": "Retain"}), policy("dflt", HAMI)]
    assert retained_policies(raw, "Delete") == {"own"}
    assert retained_policies(raw, "Retain") == {"own", "dflt"}
    explicit = [policy("keep", {**HAMI, "onDelete": "Delete"})]
    assert retained_policies(explicit, "Retain") == frozenset()


def test_a_retained_policys_node_is_marked_and_keeps_its_labels_and_taints() -> None:
    raw = configured()
    assert retaining_node(raw, {"p"}, {"p"}, "Delete")
    outcome = node_outcome(raw, retain=True, gpu_pods=("team/train-0",))
    assert outcome.skipped is None and outcome.change.patch is not None
    out = apply(raw, outcome.change.patch)
    assert annotations_of(out)[contract.ANN_RETAINED] == "p"
    assert contract.ANN_OWNED not in annotations_of(out)
    kept = {k: v for k, v in labels_of(raw).items() if k != contract.LABEL_POLICY}
    assert labels_of(out) == kept, "every other label stays, the plugin's placement one too"
    assert taints_of(out) == taints_of(raw)
    assert any("onDelete: Retain" in line for line in outcome.change.left)
    # and a node a Retain deletion left already is not touched at all
    again = node_outcome(out, retain=retaining_node(out, set(), set(), "Delete"))
    assert again.change.patch is None
    assert "onDelete: Retain" in again.change.left[0]


def test_a_node_of_a_policy_that_is_gone_follows_the_config_default() -> None:
    raw = configured()
    assert not retaining_node(raw, set(), set(), "Delete")
    assert retaining_node(raw, set(), set(), "Retain")
    assert not retaining_node(raw, set(), {"p"}, "Retain"), "its policy exists and says Delete"


def test_retaining_undoes_a_transition_under_way() -> None:
    raw = configured()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    record = NodeRollout(
        policy="p",
        generation=1,
        target="",
        kind="leave",
        phase="Pausing",
        started=now,
        since=now,
        cordoned=True,
        paused={DCGM: "true"},
    )
    raw["metadata"]["labels"][DCGM] = PAUSED_VALUE
    raw["metadata"]["annotations"][contract.ANN_ROLLOUT] = record.to_annotation()
    raw["spec"]["unschedulable"] = True
    outcome = node_outcome(raw, retain=True)
    assert outcome.change.patch is not None
    out = apply(raw, outcome.change.patch)
    assert labels_of(out)[DCGM] == "true" and "unschedulable" not in out["spec"]
    assert contract.ANN_ROLLOUT not in annotations_of(out)
    assert "uncordoned (a transition of the operator had cordoned it)" in outcome.change.did


def test_a_node_running_gpu_pods_is_skipped_unless_forced() -> None:
    raw = configured()
    pods = tuple(f"team/job-{i}" for i in range(7))
    skipped = node_outcome(raw, retain=False, gpu_pods=pods)
    assert skipped.change.patch is None and skipped.skipped is not None
    assert "7 GPU pod(s)" in skipped.skipped and "team/job-4 and 2 more" in skipped.skipped
    assert "--force" in skipped.skipped
    forced = node_outcome(raw, retain=False, gpu_pods=pods, force=True)
    assert forced.skipped is None and forced.change.patch is not None
    out = apply(raw, forced.change.patch)
    assert not [k for k in labels_of(out) if k.startswith(contract.GROUP)]
    idle = node_outcome(raw, retain=False)
    assert idle.skipped is None and idle.change.patch == forced.change.patch
    # a node with nothing of the operator's is never skipped, pods or not
    bare = node_outcome(node("n2"), retain=False, gpu_pods=pods)
    assert bare.skipped is None and bare.change.patch is None
