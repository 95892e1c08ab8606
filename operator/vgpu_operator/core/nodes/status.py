"""A policy's status, computed from the cluster plan; kstatus, Flux and Argo CD read it.

Conditions (each with `observedGeneration`; `lastTransitionTime` kept while the status stays):
- `Ready`: True when every matched node is ready and nothing is wrong;
- `Reconciling`: True while the operator still has work: writes to send, or node agents to finish;
- `Stalled`: True when progress needs a person: an invalid spec (reason `InvalidSpec`, the message
  names the field), nodes with problems (`NodeProblems`: a failed transition (`core.rollout.decide`,
  its reason), a label or taint collision, an agent that failed, or a node whose writes the
  apiserver keeps refusing), a conflict (`Conflict`), or a change the device plugin cannot apply
  (`PluginIgnoresNodeValues`: the message names the field and the fix; its nodes are held,
  `core.volcano.plugin_refusal`), or a label or taint key the operator config's policyKeys does
  not list (`PolicyKeyNotListed`, `core.nodes.policy_keys`: held the same way);
- a policy held while the operator has still to read what decides it (`ParsedPolicy.waiting`, e.g.
  `WaitingForScheduler`, `core.volcano.soft_slicing`) is no person's problem: `Reconciling` True
  with the wait's reason, `Ready` False with it while a node is not ready, `Stalled` False;
- `Conflict`: present only while some node is selected by this policy and another one of the same
  priority; the message names the nodes and the other policies;
- conditions computed elsewhere, passed in as `extra_conditions` (e.g. `ConfigConsistent`, from
  the Volcano/HAMi consistency rules): written after these, same transition-time rules.

A node is *ready* when it is owned by the policy, already carries the desired state (no write
left: labels, taints, target and released config) and, for a mode that needs the node agent
(`mig`: MIG mode and layout), the agent reports `vgpu.volcano.sh/state=success`. Other modes need
no agent work, so an absent state label is fine, but an agent that reports `pending`, `applying`,
`failed` or `blocked` is believed.

A node whose write the apiserver refused (422 from an admission policy, 403, 429, 5xx, a timeout)
is a problem of the policy that owns it, or whose label it still carries, with the apiserver's
message: the shell passes those failures in (`write_failures`, node -> message) while the node
backs off, so the status stays a function of its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, cast

from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.planner import ClusterPlan, NodePlan
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.models.policy import (
    MAX_PROBLEM_NODES,
    Condition,
    NodeProblem,
    VGPUNodePolicyStatus,
)
from vgpu_operator.models.rollout import NodeRollout

AGENT_MODES = frozenset({"mig"})
CONDITION_ORDER = ("Ready", "Reconciling", "Stalled", "Conflict")
WRITE_FAILED = "WriteFailed"  # the reason of a node whose writes the apiserver refuses
_MAX_MESSAGE = 1000


ConditionStatus = Literal["True", "False", "Unknown"]


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with seconds, as Kubernetes writes times."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def change_stamp(now: datetime) -> str:
    """RFC 3339 in UTC to the microsecond: when the operator changed what a component reads, or
    requested a restart. Restart times and change times then order exactly; against pod start
    times (whole seconds) a change of the operator's counts to the end of its second
    (`rules.snapshot.started_before`)."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_ready(facts: NodeFacts, plan: NodePlan, mode: str) -> bool:
    if not plan.in_sync or plan.problems or contract.ANN_ROLLOUT in facts.annotations:
        return False  # (a node in a transition is not ready before it ends)
    state = facts.agent_state
    if mode in AGENT_MODES:
        return state == "success"
    return state in (None, "success")


def _rollout_problem(facts: NodeFacts) -> NodeProblem | None:
    """A node whose transition failed (core.rollout.decide): its reason, until the spec changes."""
    raw = facts.annotations.get(contract.ANN_ROLLOUT)
    if raw is None:
        return None
    try:
        record = NodeRollout.from_annotation(raw)
    except (ValidationError, ValueError):
        return NodeProblem(
            node=facts.name,
            reason="RolloutStateUnreadable",
            message=f"{contract.ANN_ROLLOUT} does not parse; the node is held",
        )
    if record is None or not record.failed:
        return None
    return NodeProblem(
        node=facts.name,
        reason=record.reason,
        message=_clip(f"{record.message}; the rollout takes no new nodes until the spec changes"),
    )


def _agent_problem(facts: NodeFacts) -> NodeProblem | None:
    if facts.agent_state in ("failed", "blocked"):
        return NodeProblem(
            node=facts.name,
            reason=f"Agent{facts.agent_state.capitalize()}",
            message=f"the node agent reports {facts.agent_state}; see the node's events",
        )
    return None


def write_problem(node: str, failure: str) -> NodeProblem:
    """A node whose writes the apiserver refuses: its message, and what to look at."""
    return NodeProblem(
        node=node,
        reason=WRITE_FAILED,
        message=_clip(
            f"the apiserver refused the node's update: {failure}; retried with backoff; fix: "
            "what refuses it (an admission policy or webhook, RBAC, the apiserver's load)"
        ),
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def compute_status(
    parsed: ParsedPolicy,
    cluster: ClusterPlan,
    nodes: Mapping[str, NodeFacts],
    old_status: Mapping[str, Any] | None,
    now: datetime,
    extra_conditions: Mapping[str, tuple[str, str, str]] | None = None,
    write_failures: Mapping[str, str] | None = None,
) -> VGPUNodePolicyStatus:
    """The status of one policy after planning; `now` stamps conditions that change.
    `write_failures`: {node: the apiserver's message} of nodes whose writes are refused."""
    name, generation = parsed.name, parsed.generation
    failures = write_failures or {}
    conditions: dict[str, tuple[str, str, str]] = {}  # type -> (status, reason, message)
    extra = dict(extra_conditions or {})
    problems: list[NodeProblem] = []

    if parsed.policy is None or not parsed.usable:
        held = sorted(n for n, f in nodes.items() if f.policy_label == name)
        text = _clip("; ".join(p.describe() for p in parsed.problems))
        conditions["Ready"] = ("False", "InvalidSpec", text)
        conditions["Reconciling"] = ("False", "InvalidSpec", "waiting for a valid spec")
        conditions["Stalled"] = ("True", "InvalidSpec", text)
        return _finish(name, generation, {**extra, **conditions}, [], len(held), 0, old_status, now)

    mode = parsed.policy.spec.mode
    owned = sorted(n for n, a in cluster.assignments.items() if a.owner == name)
    ready = [n for n in owned if node_ready(nodes[n], cluster.plans[n], mode)]
    conflicts = sorted(
        n for n, a in cluster.assignments.items() if a.conflicted and name in a.conflict
    )
    pending = 0
    for node in owned:
        plan = cluster.plans[node]
        if plan.problems:
            problems.extend(
                NodeProblem(node=node, reason=p.reason, message=_clip(p.describe()))
                for p in plan.problems[:1]
            )
        elif node in failures:
            problems.append(write_problem(node, failures[node]))
        elif (failed := _rollout_problem(nodes[node])) is not None:
            problems.append(failed)
        elif (agent := _agent_problem(nodes[node])) is not None:
            problems.append(agent)
        elif node not in ready:
            pending += 1
    # Nodes leaving the policy (their labels still to remove) whose writes are refused.
    if failures:
        mine = set(owned)
        problems.extend(
            write_problem(node, failures[node])
            for node in sorted(failures)
            if node in nodes and nodes[node].policy_label == name and node not in mine
        )
    for node in conflicts:
        others = ", ".join(cluster.assignments[node].others_in_conflict(name))
        problems.append(
            NodeProblem(
                node=node,
                reason="Conflict",
                message=f"selected with the same priority by policy {others}; left as it is",
            )
        )

    if parsed.deleting:
        return _deleting(parsed, nodes, extra, old_status, now)

    suspended = parsed.suspended
    refused = _clip("; ".join(p.describe() for p in parsed.refused))
    summary = f"{len(ready)}/{len(owned)} nodes ready"
    blocked = [p for p in problems if p.reason != "Conflict"]
    parts = []
    if blocked:
        parts.append(f"{_count(len(blocked), 'node')} with problems")
    if conflicts:
        parts.append(f"{_count(len(conflicts), 'node')} in conflict")
        detail = "; ".join(f"{p.node}: {p.message}" for p in problems if p.reason == "Conflict")
        conditions["Conflict"] = ("True", "EqualPriority", _clip(detail))
    if parts:
        reason = "NodeProblems" if blocked else "Conflict"
        first = f"; first: {blocked[0].node}: {blocked[0].message}" if blocked else ""
        conditions["Ready"] = ("False", reason, f"{summary}; " + ", ".join(parts))
        conditions["Stalled"] = ("True", reason, _clip(", ".join(parts) + first))
    else:
        if pending:
            why = "Progressing"
            if suspended:
                why = _held_reason(parsed)
            conditions["Ready"] = ("False", why, summary)
        elif owned:
            conditions["Ready"] = ("True", "Ready", summary)
        else:
            conditions["Ready"] = ("True", "NoMatchingNodes", "no node matches spec.nodeSelector")
        conditions["Stalled"] = ("False", "NoProblems", "")
    if (refusal := _refused_reason(parsed)) is not None:  # the change needs a person
        conditions["Stalled"] = ("True", refusal, refused)
        conditions["Reconciling"] = ("False", refusal, "the change is refused: nodes held")
    elif suspended and (wait := _held_reason(parsed)) != "Suspended":
        waits = _clip("; ".join(p.describe() for p in parsed.waiting))
        conditions["Reconciling"] = ("True", wait, waits)
    elif suspended:
        conditions["Reconciling"] = ("False", "Suspended", "spec.suspend is true: nodes are held")
    elif pending:
        conditions["Reconciling"] = ("True", "Progressing", f"{_count(pending, 'node')} not ready")
    else:
        conditions["Reconciling"] = ("False", "Stalled" if parts else "Ready", "")
    problems.sort(key=lambda p: (p.node, p.reason))
    return _finish(
        name, generation, {**extra, **conditions}, problems, len(owned), len(ready), old_status, now
    )


def _refused_reason(parsed: ParsedPolicy) -> str | None:
    """The reason of the policy's first refusal (`core.volcano.plugin_refusal`:
    PluginIgnoresNodeValues; `core.nodes.policy_keys`: PolicyKeyNotListed), None: not refused."""
    return parsed.refused[0].reason if parsed.refused else None


def _held_reason(parsed: ParsedPolicy) -> str:
    """Why a suspended policy's nodes are held: its first refusal, `spec.suspend` (Suspended),
    else the first of what it waits for."""
    if parsed.refused:
        return parsed.refused[0].reason
    if parsed.waiting and not (parsed.policy is not None and parsed.policy.spec.suspend):
        return parsed.waiting[0].reason
    return "Suspended"


def _leaving(facts: NodeFacts, policy: str) -> NodeRollout | None:
    """The node's record of a transition charged to `policy` (a leave, `core.rollout.leave`)."""
    try:
        record = NodeRollout.from_annotation(facts.annotations.get(contract.ANN_ROLLOUT))
    except (ValidationError, ValueError):
        return None
    return record if record is not None and record.policy == policy else None


def _deleting(
    parsed: ParsedPolicy,
    nodes: Mapping[str, NodeFacts],
    extra: Mapping[str, tuple[str, str, str]],
    old_status: Mapping[str, Any] | None,
    now: datetime,
) -> VGPUNodePolicyStatus:
    """A policy being deleted: its finalizer waits for its nodes to leave (at once, or paced by
    `spec.rollout` while GPU pods run on them); the conditions say how far that is."""
    name = parsed.name
    still = sorted(
        n for n, f in nodes.items() if f.policy_label == name or _leaving(f, name) is not None
    )
    records = {n: r for n in still if (r := _leaving(nodes[n], name)) is not None}
    failed = sorted(n for n, r in records.items() if r.failed)
    moving = len(records) - len(failed)
    message = f"releasing {_count(len(still), 'node')}"
    if records:
        message += (
            f": {moving} in transition, {len(still) - len(records)} waiting, "
            f"{len(failed)} failed (spec.rollout paces nodes that run GPU pods)"
        )
    if still and parsed.policy is not None and not parsed.policy.evict_gpu_pods:
        message += (
            f"; no GPU pod is evicted ({contract.ANN_EVICT_GPU_PODS}: false): a node that runs "
            "GPU pods keeps its configuration until they end"
        )
    problems = [p for n in failed if (p := _rollout_problem(nodes[n])) is not None]
    conditions: dict[str, tuple[str, str, str]] = {
        "Ready": ("False", "Deleting", message),
        "Reconciling": ("True", "Deleting", message),
        "Stalled": ("False", "Deleting", ""),
    }
    if problems:
        first = f"{problems[0].node}: {problems[0].message}"
        conditions["Stalled"] = ("True", "NodeProblems", _clip(f"{message}; first: {first}"))
    return _finish(
        name, parsed.generation, {**extra, **conditions}, problems, len(still), 0, old_status, now
    )


def _finish(
    name: str,
    generation: int,
    conditions: Mapping[str, tuple[str, str, str]],
    problems: list[NodeProblem],
    matched: int,
    ready: int,
    old_status: Mapping[str, Any] | None,
    now: datetime,
) -> VGPUNodePolicyStatus:
    del name
    previous = _old_conditions(old_status)
    stamped = []
    order = [*CONDITION_ORDER, *sorted(k for k in conditions if k not in CONDITION_ORDER)]
    for kind in order:
        if kind not in conditions:
            continue
        status, reason, message = conditions[kind]
        before = previous.get(kind)
        since = (
            before.last_transition_time
            if before is not None and before.status == status
            else timestamp(now)
        )
        stamped.append(
            Condition(
                type=kind,
                status=cast(ConditionStatus, status),
                reason=reason,
                message=message,
                observed_generation=generation,
                last_transition_time=since,
            )
        )
    return VGPUNodePolicyStatus(
        observed_generation=generation,
        conditions=stamped,
        matched_nodes=matched,
        ready_nodes=ready,
        problem_nodes=problems[:MAX_PROBLEM_NODES],
    )


def _old_conditions(old_status: Mapping[str, Any] | None) -> dict[str, Condition]:
    out: dict[str, Condition] = {}
    for raw in (old_status or {}).get("conditions") or []:
        try:
            condition = Condition.model_validate(raw)
        except ValidationError:
            continue
        out[condition.type] = condition
    return out


def status_body(status: VGPUNodePolicyStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def status_patch(
    old_status: Mapping[str, Any] | None, new_status: VGPUNodePolicyStatus
) -> dict[str, Any] | None:
    """The merge patch for the status subresource, or None when nothing changed (no write)."""
    new = status_body(new_status)
    old = dict(old_status or {})
    defaults = status_body(VGPUNodePolicyStatus())
    if all(_normal(old.get(k, defaults.get(k)), k) == _normal(v, k) for k, v in new.items()):
        return None
    return {"status": new}


def _normal(value: Any, key: str) -> Any:
    """Compare conditions as the apiserver returns them (`message` defaulted to "")."""
    if key == "conditions" and isinstance(value, list):
        return [{"message": "", **c} if isinstance(c, Mapping) else c for c in value]
    if key == "problemNodes" and isinstance(value, list):
        return [{"message": "", **p} if isinstance(p, Mapping) else p for p in value]
    return value
