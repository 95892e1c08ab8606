"""The floor of bench/rollout.py: the operator's own writes of a transition, replayed by a bare
client on a group of nodes of its own, in the same run.

The operator runs with a client certificate of its ServiceAccount's name and groups that the
local control plane's audit policy logs with request bodies
(`LocalCluster.request_audited_kubeconfig`): every write it makes is in the audit log, body and
all. For each of its nodes, the floor takes the operator's successful writes about that node, in
the order the apiserver received them:
- the node's merge PATCHes (cordon, the `vgpu.volcano.sh/rollout` record of each phase, the
  plugin's placement label, the release, the resume and uncordon), without the
  `metadata.resourceVersion` precondition (the floor's nodes have their own versions);
- the evictions of the node's GPU pod (`POST pods/NAME/eviction`);
- the Events about the node,
with the operator's node name, pod name and node uid replaced by the floor node's. A bare client
(the operator's ServiceAccount, as in bench/convergence.py: the same RBAC and admission) sends
them one after the other, node by node, with as many nodes at once as the operator's budget
(`maxUnavailable`), nodes taken in the order the operator took them. It waits only where the
operator had to wait for someone else: after an eviction, until the pod is gone, before the next
node PATCH; after the release (the PATCH that writes `vgpu.volcano.sh/config`), until the node
agent reports `success` for it (`GroupWatch`, the watches that time both runs). Everything else
the operator waited for (its passes, its timers, its cache) the floor does not wait for.

The operator's other writes in the window (the policy's status and finalizer, Events about the
policy, the Lease) are not replayed; they are counted and printed beside the table.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rollout_watch import GroupWatch
from vgpu_devcluster.cluster import LocalCluster
from vgpu_operator import contract, kubeapi

Kind = Literal["node", "eviction", "event"]
WRITES = ("create", "patch", "update", "delete")


@dataclass(frozen=True)
class Write:
    node: str  # the operator's node the write is about
    at: str  # when the apiserver received it (RFC 3339, as the audit log has it)
    kind: Kind
    method: str
    path: str
    body: dict[str, Any]

    @property
    def releases(self) -> bool:
        """A node PATCH that writes the released configuration."""
        annotations = (self.body.get("metadata") or {}).get("annotations") or {}
        return self.kind == "node" and bool(annotations.get(contract.ANN_CONFIG))


def _event_path(ref: Mapping[str, Any]) -> str:
    group, version = ref.get("apiGroup") or "", ref.get("apiVersion") or "v1"
    root = "/api/v1" if not group else f"/apis/{group}/{version}"
    return f"{root}/namespaces/{ref.get('namespace')}/events"


def _about(body: Mapping[str, Any]) -> str | None:
    """The node an Event is about (core/v1 `involvedObject`, events.k8s.io `regarding`)."""
    target = body.get("involvedObject") or body.get("regarding") or {}
    return str(target.get("name")) if target.get("kind") == "Node" else None


def recorded(
    cluster: LocalCluster, user: str, offset: int, nodes: set[str]
) -> tuple[dict[str, list[Write]], Counter[str]]:
    """The writes of `user` since `offset` about `nodes` (in the order received), and the
    count of its other writes by resource."""
    per_node: dict[str, list[Write]] = {n: [] for n in nodes}
    others: Counter[str] = Counter()
    events = sorted(
        (e for e in cluster.audit_events(user=user, offset=offset) if e["verb"] in WRITES),
        key=lambda e: e["requestReceivedTimestamp"],
    )
    for e in events:
        if e["responseStatus"]["code"] >= 300:
            continue
        ref = e.get("objectRef") or {}
        resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
        body = e.get("requestObject") or {}
        if not isinstance(body, dict):  # a JSON Patch (the policy's finalizer): a list
            others[f"{e['verb']} {resource} (JSON Patch)"] += 1
            if resource == "nodes":  # the floor sends merge patches: it could not send this
                raise ValueError(f"a JSON Patch of node {ref.get('name')}: {body}")
            continue
        name, at = str(ref.get("name", "")), str(e["requestReceivedTimestamp"])
        if resource == "nodes" and e["verb"] == "patch" and name in nodes:
            body = json.loads(json.dumps(body))
            (body.get("metadata") or {}).pop("resourceVersion", None)
            path = kubeapi.node_path(name)
            per_node[name].append(Write(name, at, "node", "PATCH", path, body))
        elif resource == "pods/eviction" and e["verb"] == "create" and name[4:] in nodes:
            path = f"/api/v1/namespaces/{ref.get('namespace')}/pods/{name}/eviction"
            per_node[name[4:]].append(Write(name[4:], at, "eviction", "POST", path, body))
        elif resource == "events" and e["verb"] == "create" and _about(body) in nodes:
            node = str(_about(body))
            per_node[node].append(Write(node, at, "event", "POST", _event_path(ref), body))
        else:
            target = body.get("involvedObject") or body.get("regarding") or {}
            about = f" about a {target['kind']}" if target.get("kind") else ""
            others[f"{e['verb']} {resource}{about}"] += 1
    return per_node, others


def translated(write: Write, names: Mapping[str, str]) -> Write:
    """The write with every operator string in `names` (node name, node uid) replaced by the
    floor's (pod names are `gpu-<node>`, so they follow the node's)."""
    body, path = json.dumps(write.body), write.path
    for old, new in names.items():
        body, path = body.replace(old, new), path.replace(old, new)
    floor = names[write.node]
    return Write(floor, write.at, write.kind, write.method, path, json.loads(body))


async def send(api: Any, write: Write) -> None:
    """One write. An eviction of a pod already gone (404) and an Event already posted (409)
    are answers the operator takes as done too; any other refusal ends the run."""
    try:
        await kubeapi.request(
            api,
            write.method,
            write.path,
            body=write.body,
            content_type=kubeapi.MERGE_PATCH if write.method == "PATCH" else kubeapi.JSON,
            field_manager=None,
        )
    except kubeapi.NotFound:
        if write.kind != "eviction":
            raise
    except kubeapi.Conflict:
        if write.kind != "event":
            raise


def foreign(taint: Mapping[str, Any]) -> bool:
    """A taint of Kubernetes' own (`node.kubernetes.io/unschedulable`, which the controller
    manager puts on a cordoned node and takes off): no policy may own such a key."""
    key = str(taint.get("key", ""))
    return "kubernetes.io/" in key or "k8s.io/" in key


def with_foreign_taints(write: Write, current: Sequence[Mapping[str, Any]] | None) -> Write:
    """A node PATCH that sets `spec.taints` (a merge patch replaces the whole list) carries
    the foreign taints the operator's node had when it wrote, which the floor's node may not
    have at the same moment (the controller manager's unschedulable taint comes and goes on
    its own clock); the chart's admission policy refuses a write of the operator's identity
    that adds one. So the floor sends the operator's own taints from the body with the floor
    node's foreign taints as the watch last saw them, as the operator builds the list from
    its cache."""
    spec = write.body.get("spec") or {}
    if write.kind != "node" or "taints" not in spec or current is None:
        return write
    own = [t for t in spec["taints"] or [] if not foreign(t)]
    taints = own + [t for t in current if foreign(t)]
    body = {**write.body, "spec": {**spec, "taints": taints or None}}
    return Write(write.node, write.at, write.kind, write.method, write.path, body)


async def replay_node(api: Any, writes: Sequence[Write], watch: GroupWatch | None) -> None:
    """One floor node's writes in order; with `watch`, waiting where the operator waited for
    the pod or the agent (module docstring)."""
    wait: Any = None
    for write in writes:
        if write.kind == "node" and wait is not None and watch is not None:
            await watch.until(wait)
            wait = None
        if watch is not None:
            write = with_foreign_taints(write, watch.taints.get(write.node))
        await send(api, write)
        if watch is None:
            continue
        tl = watch.timelines[write.node]
        if write.kind == "eviction":
            wait = lambda tl=tl: tl.pod_gone is not None  # noqa: E731
        elif write.releases:
            wait = lambda tl=tl: tl.agent_done is not None  # noqa: E731


async def replay(
    api: Any,
    writes: Mapping[str, list[Write]],
    budget: int,
    watch: GroupWatch | None = None,
) -> None:
    """Every node's writes (already translated, keyed by floor node), `budget` nodes at a time,
    in the order of each node's first write's place in `writes`."""
    gate = asyncio.Semaphore(budget)

    async def one(node: str) -> None:
        async with gate:
            await replay_node(api, writes[node], watch)

    await asyncio.gather(*(one(n) for n in writes if writes[n]))


def taken(per_node: Mapping[str, list[Write]]) -> list[str]:
    """The nodes in the order their first write was received (as the operator took them)."""
    firsts = {n: ws[0].at for n, ws in per_node.items() if ws}
    return sorted(firsts, key=lambda n: (firsts[n], n))


def for_floor(
    per_node: Mapping[str, list[Write]],
    order: Sequence[str],
    names: Mapping[str, Mapping[str, str]],
) -> dict[str, list[Write]]:
    """The operator's writes per node, in `order` (its nodes as it took them), translated for
    the floor: `names[op_node]` maps each operator string of that node to the floor's."""
    return {names[n][n]: [translated(w, names[n]) for w in per_node[n]] for n in order}
