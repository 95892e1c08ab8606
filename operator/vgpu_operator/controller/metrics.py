"""The controller's Prometheus metrics, named by Prometheus conventions
(https://prometheus.io/docs/practices/naming/): `vgpu_operator_` prefix, base units (seconds),
`_total` on counters. The API seam's own (`vgpu_operator_api_errors_total{status,verb}`,
`vgpu_operator_api_auth_failing_seconds`, `vgpu_operator_watch_restarts_total`) live in
`kubeapi`, the node agent's (`vgpu_operator_agent_*`) in `agent.metrics`, the leader's
(`vgpu_operator_leader`) in `controller.leader`.

The gauges are set from whole snapshots (`export_nodes`, `export_policy_conditions`, the
findings of a configuration pass): each export replaces every series of its gauge, so a policy
or a rule that is gone leaves no stale series behind.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram

from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import NodeFacts

RECONCILES = Counter(
    "vgpu_operator_reconciliations_total",
    "Policy reconcile passes, by result (ok, error)",
    ["result"],
)
NODE_WRITES = Counter(
    "vgpu_operator_node_writes_total",
    "PATCHes the operator sent to Nodes, by outcome (ok, conflict, error)",
    ["outcome"],
)
NODES_MANAGED = Gauge(
    "vgpu_operator_nodes_managed",
    "Nodes owned by a policy, by policy, desired mode and state (the agent's state label: "
    "pending, applying, success, failed, blocked; `blocked` also for a node the operator "
    "refuses to write; `unknown` while no agent has reported)",
    ["policy", "mode", "state"],
)
NODE_INFO = Gauge(
    "vgpu_operator_node_info",
    "1 per node owned by a policy, with its policy, desired mode and state (labels as "
    "vgpu_operator_nodes_managed): the desired side of the dashboard's desired-vs-actual table",
    ["node", "policy", "mode", "state"],
)
CONFLICTS = Gauge(
    "vgpu_operator_node_conflicts",
    "Nodes selected by several policies of equal top priority",
)
FINDINGS = Gauge(
    "vgpu_operator_findings",
    "Open consistency findings of the last configuration pass, by rule and severity",
    ["rule", "severity"],
)
CONFIGURATION_PASSES = Counter(
    "vgpu_operator_configuration_passes_total",
    "Configuration passes (render, rules, writes of Volcano/HAMi objects), by result",
    ["result"],
)
POLICY_CONDITION = Gauge(
    "vgpu_operator_policy_condition",
    "A policy's status conditions as last computed: 1 while True, 0 otherwise",
    ["policy", "condition"],
)
TRANSITIONS_IN_FLIGHT = Gauge(
    "vgpu_operator_transitions_in_flight",
    "Nodes in a disruptive transition, by policy: a rollout record on the node "
    "(vgpu.volcano.sh/rollout) or a released configuration that differs from its target",
    ["policy"],
)
RECONCILE_SECONDS = Histogram(
    "vgpu_operator_reconcile_duration_seconds",
    "Time of one policy reconcile pass across its nodes",
)
UNSCHEDULABLE_WARNINGS = Counter(
    "vgpu_operator_unschedulable_pod_warnings_total",
    "Warning Events posted on pods that can never be scheduled, by cause",
    ["cause"],
)

ADMISSION_POLICIES_ENFORCED = Gauge(
    "vgpu_operator_admission_policies_enforced",
    "1 while the chart's admission policies are checked and enforced, else 0; one series, "
    "labelled with the AdmissionPoliciesEnforced condition's reason (NotRefused, "
    "BindingNotDenying, PolicyMissing, ...: the controller then writes nothing; NotRequired, "
    "NotConfigured: nothing is checked)",
    ["reason"],
)

UNKNOWN_STATE = "unknown"
BLOCKED = "blocked"

for _result in ("ok", "error"):  # both series exist from the start (rate() and alerts need 0)
    RECONCILES.labels(result=_result)
    CONFIGURATION_PASSES.labels(result=_result)
for _outcome in ("ok", "conflict", "error"):
    NODE_WRITES.labels(outcome=_outcome)


def node_state(facts: NodeFacts | None, *, refused: bool) -> str:
    """The state a managed node is counted under."""
    if refused:
        return BLOCKED
    state = facts.agent_state if facts is not None else None
    return state or UNKNOWN_STATE


def in_transition(facts: NodeFacts) -> bool:
    """A disruptive change under way on the node: the rollout's record, or a released
    configuration held back from its target (contract.ANN_CONFIG vs ANN_TARGET)."""
    if facts.annotations.get(contract.ANN_ROLLOUT):
        return True
    return facts.target is not None and facts.config != facts.target


def export_nodes(
    owned: Mapping[str, tuple[str, str, str]],
    transitions: Mapping[str, int],
    conflicts: int,
) -> None:
    """Replace the node gauges: `owned` is node -> (policy, mode, state) per managed node,
    `transitions` the nodes in transition per policy (every policy appears, 0 included)."""
    counts: dict[tuple[str, str, str], int] = {}
    NODE_INFO.clear()
    for node, key in owned.items():
        counts[key] = counts.get(key, 0) + 1
        NODE_INFO.labels(node=node, policy=key[0], mode=key[1], state=key[2]).set(1)
    NODES_MANAGED.clear()
    for (policy, mode, state), n in counts.items():
        NODES_MANAGED.labels(policy=policy, mode=mode, state=state).set(n)
    TRANSITIONS_IN_FLIGHT.clear()
    for policy, n in transitions.items():
        TRANSITIONS_IN_FLIGHT.labels(policy=policy).set(n)
    CONFLICTS.set(conflicts)


def export_findings(counts: Mapping[tuple[str, str], int]) -> None:
    """Replace the findings gauge with one configuration pass's (rule, severity) counts."""
    FINDINGS.clear()
    for (rule_id, severity), n in counts.items():
        FINDINGS.labels(rule=rule_id, severity=severity).set(n)


def export_policy_conditions(conditions: Mapping[str, Mapping[str, str]]) -> None:
    """Replace the conditions gauge: per policy, condition type -> "True"/"False"/"Unknown"."""
    POLICY_CONDITION.clear()
    for policy, types in conditions.items():
        for kind, status in types.items():
            POLICY_CONDITION.labels(policy=policy, condition=kind).set(1 if status == "True" else 0)


def export_admission(reason: str, enforced: bool) -> None:
    """Replace the admission gauge with the last verdict (controller.admission_guard)."""
    ADMISSION_POLICIES_ENFORCED.clear()
    ADMISSION_POLICIES_ENFORCED.labels(reason=reason).set(1 if enforced else 0)
