"""`core.plan`: what the operator would do, on every example and on a mode change of a pool whose
nodes run GPU pods. The cluster is Volcano's and HAMi's own install manifests (unmodified, from
`vgpu_devcluster.upstream`) and nodes of several GPU models."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit.nodekit import node
from tests.kit.plan_world import CONFIG, LATER, NOW, PRESENT, a100_cluster, run, snapshot
from vgpu_operator import contract
from vgpu_operator.core.findings import config_condition
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.core.plan import plan, proposed
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import load_config
from vgpu_operator.models.config_dra import DraInstallation

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# every example that has policies (others, e.g. GitOps manifests, install the chart)
EXAMPLE_FILES = [
    f for f in sorted(EXAMPLES.glob("*/*.yaml")) if "kind: VGPUNodePolicy" in f.read_text()
]
NODE_CM = "volcano-vgpu-node-config"


def node_for(raw_policy: dict[str, Any]) -> dict[str, Any]:
    """A node the policy selects, with the hardware of its mode (GFD's labels of an A100 for
    MIG, of an RTX 4090 otherwise; the Ascend device plugin's chip label for Ascend)."""
    spec = raw_policy["spec"]
    labels: dict[str, str] = {}
    if spec["mode"] == "ascend-vnpu":
        labels[contract.ASCEND_CHIP_LABEL] = "910B3"
    else:
        labels.update(PRESENT)
    selector = spec["nodeSelector"]
    labels.update(selector.get("matchLabels") or {})
    for expr in selector.get("matchExpressions") or []:
        if expr["operator"] in ("In", "Exists"):
            labels[expr["key"]] = (expr.get("values") or ["true"])[0]
    gpu = {"mig": "a100", "ascend-vnpu": "cpu"}.get(spec["mode"], "rtx4090")
    return node(f"{raw_policy['metadata']['name']}-node", labels, gpu=gpu)


def example_policies(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "VGPUNodePolicy"]


def test_the_examples_with_policies_are_found() -> None:
    assert len(EXAMPLE_FILES) >= 7, EXAMPLE_FILES


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_plans_its_pools_and_then_nothing(path: Path) -> None:
    raws = example_policies(path)
    nodes = [node_for(r) for r in raws] + [node("cpu-0", gpu="cpu")]
    s = snapshot(nodes, ascend=any(r["spec"]["mode"] == "ascend-vnpu" for r in raws))
    if any(r["spec"]["mode"] == "dra" for r in raws):  # the example's config names the driver
        s = replace(s, config=s.config.model_copy(update={"dra": DraInstallation()}))
    first = run(s, raws)
    assert first.changes
    entering = {n.node: n for n in first.nodes if n.enters}
    modes = {r["metadata"]["name"]: r["spec"]["mode"] for r in raws}
    # every policy gets its node, in its mode; the CPU node stays out
    assert {n: c.new_owner for n, c in entering.items()} == {f"{p}-node": p for p in modes}
    assert all(n.new_mode == modes[str(n.new_owner)] for n in entering.values())
    assert "cpu-0" not in entering
    assert not [n for n in first.nodes if n.problems]
    # the rendered node configs get an entry for every entering node HAMi's plugins serve
    node_cms = {cm.name: cm for cm in first.configmaps}
    for name, change in entering.items():
        if change.new_mode in ("whole-gpu", "dra"):  # NVIDIA's plugin or the DRA driver's
            continue
        if change.new_mode == "ascend-vnpu":  # YAML
            cm, line = "hami-device-node-config", f"-name:{name}"
        else:  # JSON
            cm, line = NODE_CM, f'"name":"{name}",'
        added = {x[1:].replace(" ", "") for x in node_cms[cm].diff.splitlines() if x[0] == "+"}
        assert line in added, node_cms[cm].diff
    # the plugin DaemonSets are placed on the labelled nodes
    assert any("placement" in " ".join(w.what) for w in first.workloads)
    # the same policies on the cluster after the writes: nothing more to do
    assert first.after is not None
    again = run(first.after, raws)
    assert not again.changes, (again.nodes, again.configmaps, again.workloads, again.restarts)
    assert not again.appearing


def test_mode_change_of_a_pool_with_running_gpu_pods() -> None:
    steady, live = a100_cluster()
    change = json.loads(json.dumps(live))
    change["spec"]["mode"] = "mig"
    change["spec"]["mig"] = {"partitioning": "dynamic"}
    parsed = parse_policy(proposed({"a100-pool": live}, change))
    assert parsed.generation == 2
    p = plan(steady, [parsed], LATER)
    assert p.changes
    by_node = {n.node: n for n in p.nodes}
    assert set(by_node) == {"a100-0", "a100-1", "a100-2"}
    assert {n.disruptive for n in p.nodes} == {"mode hami-core -> mig"}
    assert by_node["a100-0"].gpu_pods == ("team-a/train-0",)
    assert by_node["a100-1"].gpu_pods == ()
    assert by_node["a100-2"].gpu_pods == ("team-a/train-1",)
    assert not any(n.enters or n.leaves for n in p.nodes)
    # maxUnavailable 2: the rollout takes two nodes now (cordon, drain), the third waits
    assert [(w.nodes, w.now) for w in p.rollout] == [
        (("a100-0", "a100-1"), True),
        (("a100-2",), False),
    ]
    assert by_node["a100-0"].step is not None and "Draining; cordon" in by_node["a100-0"].step
    assert by_node["a100-2"].step == "held: waits for room in the rollout budget"
    assert by_node["a100-0"].patch is not None
    assert by_node["a100-0"].patch["spec"]["unschedulable"] is True
    # the ConfigMaps as they will be once every node is released
    [node_cm] = [c for c in p.configmaps if c.name == "volcano-vgpu-node-config"]
    assert node_cm.entries == ("a100-0", "a100-1", "a100-2")
    lines = [line.replace(" ", "") for line in node_cm.diff.splitlines()]
    assert lines.count('+"operatingmode":"mig",') == 3
    assert lines.count('-"operatingmode":"hami-core",') == 3
    # each node's plugin pod started before its entry changed: replaced, one by one
    assert [r.action.key for r in p.restarts] == [f"plugin-pod/a100-{i}" for i in range(3)]
    assert all(r.due is not None for r in p.restarts)  # each waits for the change to settle
    assert all("started before the node-config entry" in r.reason for r in p.restarts)
    # what doctor would say right after: the plugin pods still serve the old mode
    assert p.appearing, p.appearing


def claim_pod(name: str, on: str, claim: str) -> dict[str, Any]:
    """A pod asking no GPU resource, holding the ResourceClaim `claim` (made from a template)."""
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": on,
            "containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}],
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one"}],
        },
        "status": {
            "phase": "Running",
            "resourceClaimStatuses": [{"name": "dev", "resourceClaimName": claim}],
        },
    }


def test_a_pod_whose_claim_a_gpu_driver_allocated_is_drained_and_no_other() -> None:
    steady, live = a100_cluster()
    change = json.loads(json.dumps(live))
    change["spec"]["mode"] = "mig"
    change["spec"]["mig"] = {"partitioning": "dynamic"}
    parsed = parse_policy(proposed({"a100-pool": live}, change))
    pods = [claim_pod("infer", "a100-1", "infer-gpu"), claim_pod("router", "a100-1", "nic")]
    claims = {"team-a/infer-gpu": frozenset({"gpu.nvidia.com"}), "team-a/nic": frozenset({"x.io"})}
    s = replace(steady, pods=[*steady.pods, *pods], claims=claims)
    by_node = {n.node: n for n in plan(s, [parsed], LATER).nodes}
    assert by_node["a100-1"].gpu_pods == ("team-a/infer",)
    # claims that could not be listed: every claim counts
    by_node = {n.node: n for n in plan(replace(s, claims=None), [parsed], LATER).nodes}
    assert by_node["a100-1"].gpu_pods == ("team-a/infer", "team-a/router")


def test_live_policy_unchanged_plans_nothing() -> None:
    steady, live = a100_cluster()
    same = parse_policy(proposed({"a100-pool": live}, live))
    assert same.generation == 1
    p = plan(steady, [same], LATER)
    assert not p.changes
    assert not p.nodes and not p.configmaps and not p.workloads and not p.restarts
    assert not p.appearing and not p.resolved


def test_deleting_the_only_policy_releases_its_nodes() -> None:
    steady, _ = a100_cluster()
    p = plan(steady, [], LATER)
    assert {n.node for n in p.nodes if n.leaves} == {"a100-0", "a100-1", "a100-2"}
    assert all(n.new_owner is None and n.action == "release" for n in p.nodes)
    assert not any(n.disruptive for n in p.nodes)  # hami-core leaves the GPUs as they are


def demo_nodes() -> list[dict[str, Any]]:
    return [node_for(r) for r in example_policies(EXAMPLES / "demo" / "policies.yaml")]


def test_report_mode_writes_only_nodes() -> None:
    s = replace(snapshot(demo_nodes()), config=load_config("mode: report\n"))
    p = run(s, example_policies(EXAMPLES / "demo" / "policies.yaml"))
    assert p.changes and p.nodes
    assert not p.configmaps and not p.workloads and not p.restarts
    assert any("mode: report" in n for n in p.notes)


def test_without_volcano_or_hami_nothing_is_rendered() -> None:
    s = ClusterSnapshot(config=CONFIG, nodes=demo_nodes())
    p = run(s, example_policies(EXAMPLES / "demo" / "policies.yaml"))
    assert p.nodes and not p.configmaps and not p.workloads
    assert any("neither Volcano nor HAMi" in n for n in p.notes)


def test_static_layout_change_is_disruptive() -> None:
    nodes = [node("h100-0", PRESENT, gpu="h100")]
    [live] = [
        r
        for r in example_policies(EXAMPLES / "demo" / "policies.yaml")
        if r["metadata"]["name"] == "h100-static-mig"
    ]
    first = run(snapshot(nodes), [live])
    # a first configuration is released at once (nothing runs there yet)
    assert [(n.change, n.disruptive) for n in first.nodes] == [("trivial", None)]
    assert first.after is not None
    change = json.loads(json.dumps(live))
    change["spec"]["mig"]["layout"][0]["profiles"] = {"3g.40gb": 2}
    p = plan(
        first.after,
        [parse_policy(proposed({"h100-static-mig": live}, change))],
        NOW,
    )
    assert [n.disruptive for n in p.nodes] == ["MIG layout changes"]
    assert [w.nodes for w in p.rollout] == [("h100-0",)]


def without_predicates(s: ClusterSnapshot) -> ClusterSnapshot:
    """The README's walk-through: `predicates` removed from the scheduler conf by hand."""
    cms = json.loads(json.dumps(s.configmaps))
    [cm] = [c for c in cms if c["metadata"]["name"] == "volcano-scheduler-configmap"]
    conf = yaml.safe_load(cm["data"]["volcano-scheduler.conf"])
    for tier in conf["tiers"]:
        tier["plugins"] = [p for p in tier["plugins"] if p["name"] != "predicates"]
    cm["data"]["volcano-scheduler.conf"] = yaml.safe_dump(conf)
    return replace(s, configmaps=cms)


def test_predicates_removed_by_hand_is_put_back_and_its_finding_goes() -> None:
    steady, live = a100_cluster()
    broken = without_predicates(steady)
    p = plan(broken, [parse_policy(live)], LATER)
    assert p.changes and not p.nodes
    [cm] = p.configmaps
    assert cm.name == "volcano-scheduler-configmap"
    assert "+  - name: predicates" in cm.diff
    assert "scheduler-predicates" in {f.id for f in p.resolved}, p.resolved
    assert not [f for f in p.appearing if f.id.startswith("scheduler")]
    # in report mode the operator leaves it: the finding stays, and every policy's
    # ConfigConsistent condition names it
    report = replace(broken, config=load_config("mode: report\ngpuMemoryFactor: 11\n"))
    p = plan(report, [parse_policy(live)], LATER)
    assert not p.changes and not p.resolved
    findings = run_rules(report).findings
    status, _, message = config_condition(findings, {"a100-0"}, mode="report")
    assert status == "False" and "scheduler-predicates" in message
