"""The pure parts of bench/rollout.py (no cluster; its smoke run is in tests/cluster): a node's
timeline gives each phase's seconds and the writer's own share (the transition less the pod's
termination and the agent's apply); the floor takes, from an audit log, exactly the operator's
successful writes about each of its nodes in the order received, without the resourceVersion
precondition, counts the others apart, and swaps the operator's node names and uids for the
floor's."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))  # the benchmarks import each other by file name
    return {m: importlib.import_module(m) for m in ("rollout_watch", "rollout_floor")}


def test_a_timeline_splits_the_transition_and_the_writers_share(
    bench: dict[str, ModuleType],
) -> None:
    watch = bench["rollout_watch"]
    tl = watch.Timeline(
        started=1.0,
        phases={"Draining": 1.0, "Pausing": 4.0, "Applying": 4.5, "Verifying": 14.5},
        released=4.5,
        agent_done=13.5,
        evicted=1.5,
        pod_gone=3.5,
        ended=15.0,
    )
    assert tl.steps() == {"Draining": 3.0, "Pausing": 0.5, "Applying": 10.0, "Verifying": 0.5}
    assert (tl.total, tl.pod_wait, tl.agent) == (14.0, 2.0, 9.0)
    assert tl.own == 3.0
    unfinished = watch.Timeline(started=1.0, phases={"Draining": 1.0})
    assert unfinished.total is None and unfinished.own is None and unfinished.steps() == {}
    stats = watch.RunStats.of(20.0, {"a": tl, "b": unfinished})
    assert stats.per_minute == 6.0 and stats.own.median == 3.0
    assert stats.steps["Applying"].median == 10.0
    assert stats.own_share == pytest.approx(3.0 / 14.0)


def test_quantiles_are_nearest_rank(bench: dict[str, ModuleType]) -> None:
    q = bench["rollout_watch"].quantile
    values = [float(v) for v in range(1, 11)]
    assert (q(values, 0.5), q(values, 0.9), q([], 0.5), q([7.0], 0.9)) == (5.0, 9.0, 0.0, 7.0)


def audit(verb: str, resource: str, name: str, body: dict[str, Any], **more: Any) -> dict[str, Any]:
    ref = {"resource": resource, "name": name, "namespace": more.pop("namespace", None)}
    ref.update(more.pop("ref", {}))
    return {
        "verb": verb,
        "user": {"username": more.pop("user", OPERATOR_USER)},
        "objectRef": {k: v for k, v in ref.items() if v is not None},
        "requestObject": body,
        "responseStatus": {"code": more.pop("code", 200)},
        "requestReceivedTimestamp": more.pop("at"),
    }


def test_the_floor_takes_the_operators_writes_per_node_in_order(
    bench: dict[str, ModuleType], tmp_path: Path
) -> None:
    floor = bench["rollout_floor"]
    cordon = {
        "metadata": {"resourceVersion": "17", "annotations": {"vgpu.volcano.sh/rollout": "x"}}
    }
    release = {"metadata": {"annotations": {"vgpu.volcano.sh/config": '{"mode":"mig"}'}}}
    event = {"involvedObject": {"kind": "Node", "name": "t-op-00001", "uid": "uid-op-1"}}
    policy_event = {"involvedObject": {"kind": "VGPUNodePolicy", "name": "bench-t"}}
    lines = [
        audit("patch", "nodes", "t-op-00001", release, at="2026-11-26T05:00:03.000000Z"),
        audit("patch", "nodes", "t-op-00001", cordon, at="2026-11-26T05:00:01.000000Z"),
        audit("patch", "nodes", "t-op-00000", cordon, at="2026-11-26T05:00:02.000000Z"),
        audit(
            "create",
            "pods",
            "gpu-t-op-00001",
            {"kind": "Eviction"},
            namespace="bench-rollout",
            ref={"subresource": "eviction"},
            at="2026-11-26T05:00:01.500000Z",
        ),
        audit(
            "create", "events", "e1", event, namespace="default", at="2026-11-26T05:00:01.200000Z"
        ),
        audit(
            "create",
            "events",
            "e2",
            policy_event,
            namespace="default",
            at="2026-11-26T05:00:04.000000Z",
        ),
        audit("patch", "nodes", "t-op-00000", release, code=409, at="2026-11-26T05:00:05.000000Z"),
        audit(
            "patch",
            "nodes",
            "t-op-00000",
            release,
            user="someone",
            at="2026-11-26T05:00:06.000000Z",
        ),
        audit("patch", "vgpunodepolicies", "bench-t", {}, at="2026-11-26T05:00:07.000000Z"),
    ]
    (tmp_path / "audit.log").write_text("".join(json.dumps(e) + "\n" for e in lines))
    per_node, others = floor.recorded(
        LocalCluster(workdir=tmp_path), OPERATOR_USER, 0, {"t-op-00000", "t-op-00001"}
    )
    assert [(w.kind, w.path) for w in per_node["t-op-00001"]] == [
        ("node", "/api/v1/nodes/t-op-00001"),
        ("event", "/api/v1/namespaces/default/events"),
        ("eviction", "/api/v1/namespaces/bench-rollout/pods/gpu-t-op-00001/eviction"),
        ("node", "/api/v1/nodes/t-op-00001"),
    ]
    first = per_node["t-op-00001"][0]
    assert first.body == {"metadata": {"annotations": {"vgpu.volcano.sh/rollout": "x"}}}
    assert not first.releases and per_node["t-op-00001"][-1].releases
    assert [w.kind for w in per_node["t-op-00000"]] == ["node"]  # the 409 is not taken
    assert dict(others) == {
        "create events about a VGPUNodePolicy": 1,
        "patch vgpunodepolicies": 1,
    }
    assert floor.taken(per_node) == ["t-op-00001", "t-op-00000"]

    names = {
        "t-op-00000": {"t-op-00000": "t-fl-00000", "uid-op-0": "uid-fl-0"},
        "t-op-00001": {"t-op-00001": "t-fl-00001", "uid-op-1": "uid-fl-1"},
    }
    mine = floor.for_floor(per_node, floor.taken(per_node), names)
    assert list(mine) == ["t-fl-00001", "t-fl-00000"]
    moved = mine["t-fl-00001"]
    assert moved[1].body["involvedObject"] == {
        "kind": "Node",
        "name": "t-fl-00001",
        "uid": "uid-fl-1",
    }
    assert moved[2].path == "/api/v1/namespaces/bench-rollout/pods/gpu-t-fl-00001/eviction"
    assert {w.node for w in moved} == {"t-fl-00001"}


def test_the_floor_keeps_its_nodes_own_kubernetes_taints(bench: dict[str, ModuleType]) -> None:
    floor = bench["rollout_floor"]
    ours = {"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}
    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    body = {"spec": {"unschedulable": None, "taints": [ours, cordon]}}
    write = floor.Write("n", "t", "node", "PATCH", "/api/v1/nodes/n", body)
    assert floor.with_foreign_taints(write, []).body["spec"]["taints"] == [ours]
    assert floor.with_foreign_taints(write, [cordon]).body["spec"]["taints"] == [ours, cordon]
    released = floor.Write("n", "t", "node", "PATCH", "/api/v1/nodes/n", {"spec": {"taints": []}})
    assert floor.with_foreign_taints(released, [cordon]).body["spec"]["taints"] == [cordon]
    assert floor.with_foreign_taints(released, []).body["spec"]["taints"] is None
    labels = floor.Write("n", "t", "node", "PATCH", "/api/v1/nodes/n", {"metadata": {}})
    assert floor.with_foreign_taints(labels, [cordon]) is labels
