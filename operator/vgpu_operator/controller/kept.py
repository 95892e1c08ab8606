"""What the controller's informers keep of each object, and when two kept versions differ in
anything the operator reads.

Nodes are kept compact (`controller.snapshot.compact_node`, strings interned: thousands of Nodes
repeat the same ones) with their facts; a policy as parsed (`PolicyEntry`, in Kopf's index); a
DaemonSet as the rules read it; the configured ConfigMaps and the scheduler Deployment by
resourceVersion only. Namespaced kinds watched across namespaces are keyed by namespace/name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_operator.controller.snapshot import compact_node
from vgpu_operator.core.nodes.facts import NodeFacts, node_facts
from vgpu_operator.core.nodes.textcache import shared
from vgpu_operator.core.nodes.validate import ParsedPolicy, parse_policy
from vgpu_operator.core.rollout.gpu_pods import interned


@dataclass(frozen=True)
class IndexedNode:
    """What the operator keeps per Node: the facts the policy reconciler plans with, and the
    compact object the configuration rules read (so no pass has to list Nodes)."""

    facts: NodeFacts
    obj: dict[str, Any]
    uid: str


@dataclass(frozen=True)
class PolicyEntry:
    """What the policy index keeps per policy."""

    parsed: ParsedPolicy
    uid: str
    resource_version: str
    finalizers: tuple[str, ...]
    status: Mapping[str, Any]


def kept_node(body: Mapping[str, Any]) -> dict[str, Any]:
    """The compact Node, its strings interned (thousands of Nodes repeat the same ones)."""
    kept: dict[str, Any] = interned(compact_node(body))
    # the parts a pool's Nodes repeat, kept once (core.nodes.textcache.shared)
    meta, spec, status = kept["metadata"], kept["spec"], kept["status"]
    if "annotations" in meta:
        meta["annotations"] = shared(meta["annotations"])
    if "taints" in spec:
        spec["taints"] = shared(spec["taints"])
    for key in ("capacity", "allocatable"):
        if key in status:
            status[key] = shared(status[key])
    return kept


def indexed_node(body: Mapping[str, Any]) -> IndexedNode:
    """Both parts from the compact Node (it keeps all `node_facts` reads; a listed Node comes
    compact already): the facts share its strings."""
    obj = kept_node(body)
    return IndexedNode(node_facts(obj), obj, str(body["metadata"].get("uid", "")))


def policy_entry(body: Mapping[str, Any]) -> PolicyEntry:
    meta = body.get("metadata") or {}
    return PolicyEntry(
        parsed=parse_policy(body),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        finalizers=tuple(meta.get("finalizers") or ()),
        status=dict(body.get("status") or {}),
    )


def resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def namespaced_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def same_facts(a: NodeFacts, b: NodeFacts) -> bool:
    """Equal for the operator's purposes: everything but the resourceVersion."""
    return (
        a.labels == b.labels
        and a.annotations == b.annotations
        and a.taints == b.taints
        and a.errors == b.errors
    )


def daemonset_spec(ds: Mapping[str, Any] | None) -> Any:
    """A DaemonSet as far as the rules read it: all but its resourceVersion (status changes
    come with a new one and nothing else)."""
    if ds is None:
        return None
    meta = {k: v for k, v in (ds.get("metadata") or {}).items() if k != "resourceVersion"}
    return (meta, ds.get("spec"))
