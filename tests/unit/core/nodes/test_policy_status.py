"""Policy status: kstatus conditions, counts, bounded problems, stable transition times."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.kit.nodekit import node, parsed, policy, reconcile
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.nodes.status import compute_status, status_body, status_patch
from vgpu_operator.core.nodes.validate import Problem
from vgpu_operator.models.policy import MAX_PROBLEM_NODES, VGPUNodePolicyStatus

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
HAMI = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "a"}}}


def status_of(
    name: str,
    nodes: list[dict[str, Any]],
    policies: list[dict[str, Any]],
    old: dict[str, Any] | None = None,
    now: datetime = T0,
) -> VGPUNodePolicyStatus:
    facts = [node_facts(n) for n in nodes]
    cluster = plan_cluster(facts, parsed(policies))
    return compute_status(cluster.policies[name], cluster, {f.name: f for f in facts}, old, now)


def conds(status: VGPUNodePolicyStatus) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in status.conditions}


def test_new_policy_is_reconciling_then_ready_with_observed_generation() -> None:
    nodes = [node(f"n{i}", {"pool": "a"}) for i in range(3)] + [node("x", {"pool": "b"})]
    pols = [policy("p", HAMI, generation=2)]
    before = status_of("p", nodes, pols)
    assert before.observed_generation == 2
    assert (before.matched_nodes, before.ready_nodes) == (3, 0)
    assert conds(before) == {
        "Ready": ("False", "Progressing"),
        "Reconciling": ("True", "Progressing"),
        "Stalled": ("False", "NoProblems"),
    }
    assert all(c.observed_generation == 2 for c in before.conditions)
    configured, _ = reconcile(nodes, pols)
    after = status_of("p", configured, pols, old=status_body(before), now=T0 + timedelta(1))
    assert (after.matched_nodes, after.ready_nodes) == (3, 3)
    assert conds(after)["Ready"] == ("True", "Ready")
    assert conds(after)["Reconciling"] == ("False", "Ready")
    # Stalled kept its status: its transition time is the old one; Ready's is new
    times = {c.type: c.last_transition_time for c in after.conditions}
    assert times["Stalled"] == "2026-03-01T12:00:00Z"
    assert times["Ready"] == "2026-03-02T12:00:00Z"


def test_spec_change_moves_observed_generation_and_ready() -> None:
    pols = [policy("p", HAMI, generation=1)]
    nodes, _ = reconcile([node("n1", {"pool": "a"})], pols)
    ready = status_of("p", nodes, pols)
    assert conds(ready)["Ready"][0] == "True"
    edited = [policy("p", {**HAMI, "nodeLabels": {"x": "y"}}, generation=2)]
    during = status_of("p", nodes, edited, old=status_body(ready))
    assert during.observed_generation == 2 and conds(during)["Ready"][0] == "False"
    nodes, _ = reconcile(nodes, edited)
    done = status_of("p", nodes, edited, old=status_body(during))
    assert done.observed_generation == 2 and conds(done)["Ready"][0] == "True"


def test_mig_nodes_are_ready_only_when_the_agent_reports_success() -> None:
    mig = [policy("m", {"mode": "mig", "nodeSelector": {"matchLabels": {"pool": "a"}}})]
    nodes, _ = reconcile([node("n1", {"pool": "a"}), node("n2", {"pool": "a"})], mig)
    waiting = status_of("m", nodes, mig)
    assert waiting.ready_nodes == 0 and conds(waiting)["Reconciling"] == ("True", "Progressing")
    nodes[0]["metadata"]["labels"][contract.LABEL_STATE] = "success"
    nodes[1]["metadata"]["labels"][contract.LABEL_STATE] = "failed"
    mixed = status_of("m", nodes, mig)
    assert mixed.ready_nodes == 1
    assert conds(mixed)["Stalled"] == ("True", "NodeProblems")
    assert [(p.node, p.reason) for p in mixed.problem_nodes] == [("n2", "AgentFailed")]


def test_hami_core_node_with_an_agent_still_applying_is_not_ready() -> None:
    pols = [policy("p", HAMI)]
    nodes, _ = reconcile([node("n1", {"pool": "a"})], pols)
    nodes[0]["metadata"]["labels"][contract.LABEL_STATE] = "applying"
    assert status_of("p", nodes, pols).ready_nodes == 0


def test_equal_priority_conflict_names_node_and_other_policy_on_both() -> None:
    nodes = [node("n1", {"pool": "a", "zone": "z"})]
    pols = [
        policy("a", HAMI),
        policy("b", {"mode": "whole-gpu", "nodeSelector": {"matchLabels": {"zone": "z"}}}),
    ]
    for me, other in (("a", "b"), ("b", "a")):
        st = status_of(me, nodes, pols)
        c = {x.type: x for x in st.conditions}
        assert c["Conflict"].status == "True" and "n1" in c["Conflict"].message
        assert f"policy {other}" in c["Conflict"].message
        assert c["Stalled"].status == "True" and c["Ready"].status == "False"
        assert [(p.node, p.reason) for p in st.problem_nodes] == [("n1", "Conflict")]


def test_conflict_condition_absent_without_conflict() -> None:
    st = status_of("p", [node("n1", {"pool": "a"})], [policy("p", HAMI)])
    assert "Conflict" not in conds(st)


def test_invalid_spec_is_stalled_naming_the_field() -> None:
    bad = policy("p", {"mode": "mig", "mig": {"layout": [{"gpus": 3, "profiles": {"1g.10gb": 1}}]}})
    st = status_of("p", [node("n1", {"pool": "a"})], [bad])
    c = {x.type: x for x in st.conditions}
    assert (c["Stalled"].status, c["Stalled"].reason) == ("True", "InvalidSpec")
    assert "spec.mig.layout[0].gpus" in c["Stalled"].message
    assert c["Ready"].status == "False" and c["Reconciling"].status == "False"


def test_operator_caught_collision_is_a_condition_and_nothing_is_half_applied() -> None:
    user = node("n1", {"pool": "a", "volcano.sh/vgpu.enabled": "no"})
    good = node("n2", {"pool": "a"})
    pols = [policy("p", HAMI)]
    out, plan = reconcile([user, good], pols)
    assert out[0] == user and plan.plans["n2"].action == "configure"
    st = status_of("p", out, pols)
    assert st.matched_nodes == 2 and st.ready_nodes == 1
    problem = st.problem_nodes[0]
    assert (problem.node, problem.reason) == ("n1", "LabelCollision")
    assert "spec.nodeLabels['volcano.sh/vgpu.enabled']" in problem.message
    assert "fix:" in problem.message
    assert conds(st)["Stalled"] == ("True", "NodeProblems")


def test_problem_list_is_bounded() -> None:
    nodes = [node(f"n{i:02}", {"pool": "a", "volcano.sh/vgpu.enabled": "no"}) for i in range(30)]
    st = status_of("p", nodes, [policy("p", HAMI)])
    assert len(st.problem_nodes) == MAX_PROBLEM_NODES
    assert [p.node for p in st.problem_nodes] == [f"n{i:02}" for i in range(MAX_PROBLEM_NODES)]
    assert "30 nodes with problems" in {c.type: c for c in st.conditions}["Stalled"].message


def test_no_matching_nodes_is_ready() -> None:
    st = status_of("p", [node("n1", {"pool": "b"})], [policy("p", HAMI)])
    assert conds(st)["Ready"] == ("True", "NoMatchingNodes") and st.matched_nodes == 0


def test_suspended_policy_is_not_reconciling() -> None:
    pols = [policy("p", {**HAMI, "suspend": True})]
    st = status_of("p", [node("n1", {"pool": "a"})], pols)
    assert conds(st)["Reconciling"] == ("False", "Suspended")
    assert conds(st)["Ready"] == ("False", "Suspended")


def test_a_policy_waiting_to_be_decided_is_reconciling_not_stalled() -> None:
    """A policy held while the operator still reads what decides it (`ParsedPolicy.waiting`:
    `core.volcano.soft_slicing`'s WaitingForScheduler) needs no person: Reconciling True with
    the wait's reason and message, Stalled False, a node it has not taken not Ready for that
    reason; with `spec.suspend` as well, Suspended says why."""
    wait = Problem("spec.ascendVnpu.hamiVnpuCore", "WaitingForScheduler", "not read yet")
    nodes = {"n1": node_facts(node("n1", {"pool": "a"}))}
    for spec, reconciling, ready in (
        (HAMI, ("True", "WaitingForScheduler"), ("False", "WaitingForScheduler")),
        ({**HAMI, "suspend": True}, ("False", "Suspended"), ("False", "Suspended")),
    ):
        [p] = parsed([policy("p", spec)])
        cluster = plan_cluster(nodes.values(), [replace(p, waiting=(wait,))])
        assert cluster.plans["n1"].action == "held"  # n1 is not taken while p waits
        st = compute_status(cluster.policies["p"], cluster, nodes, None, T0)
        assert conds(st)["Reconciling"] == reconciling and conds(st)["Ready"] == ready
        assert conds(st)["Stalled"] == ("False", "NoProblems")
    [p] = parsed([policy("p", HAMI)])
    cluster = plan_cluster(nodes.values(), [replace(p, waiting=(wait,))])
    st = compute_status(cluster.policies["p"], cluster, nodes, None, T0)
    [message] = [c.message for c in st.conditions if c.type == "Reconciling"]
    assert message == wait.describe()


def test_deleting_policy_reports_nodes_still_released() -> None:
    pols = [policy("p", HAMI)]
    nodes, _ = reconcile([node("n1", {"pool": "a"})], pols)
    gone = [policy("p", HAMI, deleting=True)]
    st = status_of("p", nodes, gone)
    assert conds(st)["Ready"] == ("False", "Deleting") and st.matched_nodes == 1
    nodes, _ = reconcile(nodes, gone)
    assert status_of("p", nodes, gone).matched_nodes == 0


def test_status_patch_is_none_when_nothing_changed() -> None:
    pols = [policy("p", HAMI)]
    nodes = [node("n1", {"pool": "a"})]
    first = status_of("p", nodes, pols)
    patch = status_patch(None, first)
    assert patch is not None and patch["status"]["observedGeneration"] == 1
    # the apiserver returns what was written; recomputing later writes nothing
    stored = patch["status"]
    again = status_of("p", nodes, pols, old=stored, now=T0 + timedelta(hours=5))
    assert status_patch(stored, again) is None
    # a count change is a write
    more = status_of("p", [*nodes, node("n2", {"pool": "a"})], pols, old=stored)
    changed = status_patch(stored, more)
    assert changed is not None and changed["status"]["matchedNodes"] == 2


def test_status_patch_tolerates_server_defaults_and_garbage() -> None:
    st = status_of("p", [node("n1", {"pool": "a"})], [policy("p", HAMI)])
    body = status_body(st)
    for c in body["conditions"]:
        if c["message"] == "":
            del c["message"]  # as written by a client that omits empty strings
    assert status_patch(body, st) is None
    assert status_patch({"conditions": "garbage"}, st) is not None


def test_a_node_whose_writes_are_refused_is_a_problem_with_the_apiservers_message() -> None:
    pols = [policy("p", HAMI)]
    nodes = [node("n1", {"pool": "a"}), node("n2", {"pool": "a"})]
    facts = [node_facts(n) for n in nodes]
    cluster = plan_cluster(facts, parsed(pols))
    by_name = {f.name: f for f in facts}
    refused = "422 nodes \"n1\" is forbidden: ValidatingAdmissionPolicy 'deny' denied request"
    st = compute_status(
        cluster.policies["p"], cluster, by_name, None, T0, write_failures={"n1": refused}
    )
    [problem] = st.problem_nodes
    assert (problem.node, problem.reason) == ("n1", "WriteFailed")
    assert refused in problem.message and "fix:" in problem.message
    assert conds(st)["Stalled"] == ("True", "NodeProblems")
    assert conds(st)["Ready"] == ("False", "NodeProblems")
    stalled = {c.type: c for c in st.conditions}["Stalled"].message
    assert "1 node with problems; first: n1:" in stalled and refused in stalled
    assert conds(st)["Reconciling"] == ("True", "Progressing")  # n2 is still to be written
    # The failure gone (the write went through): no problem left.
    configured, _ = reconcile(nodes, pols)
    after = status_of("p", configured, pols, old=status_body(st))
    assert after.problem_nodes == [] and conds(after)["Ready"] == ("True", "Ready")


def test_a_refused_node_leaving_the_policy_is_still_its_problem() -> None:
    pols = [policy("p", HAMI)]
    configured, _ = reconcile([node("n1", {"pool": "a"})], pols)
    configured[0]["metadata"]["labels"]["pool"] = "b"  # no longer selected: labels to remove
    facts = [node_facts(n) for n in configured]
    cluster = plan_cluster(facts, parsed(pols))
    by_name = {f.name: f for f in facts}
    failures = {"n1": "503 etcdserver: request timed out", "gone": "503 x"}
    st = compute_status(cluster.policies["p"], cluster, by_name, None, T0, write_failures=failures)
    assert [(p.node, p.reason) for p in st.problem_nodes] == [("n1", "WriteFailed")]
    assert "503 etcdserver: request timed out" in st.problem_nodes[0].message
    other = compute_status(
        cluster.policies["p"], cluster, by_name, None, T0, write_failures={"n2": "503 x"}
    )
    assert other.problem_nodes == []
