"""One decision, three interpreters: over generated clusters and operator configurations, the
writes `plan -o json` reports are exactly the requests enforce's executor sends on the same
cluster (verb, object, body after JSON normalisation, in order), what waits is reported with
its due time and not sent, and observe mode reports the same objects.

The cluster is the one `plan` computes its configuration writes on: the snapshot with the node
PATCHes of the same plan applied (as enforce's configuration pass reads the nodes after the
policy reconciler wrote them)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit.fakeapi import FakeApi
from tests.kit.volcano_fixtures import T_CHANGED, edit, healthy, text
from vgpu_operator import contract
from vgpu_operator.commands.plan import to_json
from vgpu_operator.controller.volcano_writes import execute
from vgpu_operator.core.nodes.mergepatch import apply_merge_patch
from vgpu_operator.core.observe import configuration_would_do
from vgpu_operator.core.plan import plan
from vgpu_operator.core.volcano.restarts import RestartSettings
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, name_of
from vgpu_operator.core.volcano.writes import plan_writes
from vgpu_operator.models.config import OperatorConfig

CHANGED = datetime.fromisoformat(T_CHANGED.replace("Z", "+00:00"))
PLUGIN = ("kube-system", "volcano-device-plugin")
SCHEDULER = "deployment/volcano-system/volcano-scheduler"


def _config(split: int, factor: int, allowed: bool, interval: int) -> OperatorConfig:
    return OperatorConfig.model_validate(
        {
            "mode": "enforce",
            "gpuMemoryFactor": factor,
            "deviceDefaults": {"deviceSplitCount": split},
            "restarts": {"allowed": allowed, "minIntervalSeconds": interval},
        }
    )


def _changed_after_start(cm: dict[str, Any]) -> None:
    cm["metadata"]["annotations"][contract.ANN_DATA_CHANGED_AT] = "2026-01-03T01:00:00Z"


def _without_placement(ds: dict[str, Any]) -> None:
    spec = ds["spec"]["template"]["spec"]
    spec.pop("nodeSelector", None)
    spec["tolerations"] = [t for t in spec["tolerations"] if t.get("key") != "volcano.sh/vgpu"]


def _legacy(ds: dict[str, Any]) -> None:
    for c in ds["spec"]["template"]["spec"]["containers"]:
        c["image"] = c["image"].rsplit(":", 1)[0] + ":v1.10.0"


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterSnapshot, datetime, dict[str, datetime]]:
    cfg = _config(
        draw(st.sampled_from([10, 4])),
        draw(st.sampled_from([1, 2])),
        draw(st.sampled_from([True, True, False])),
        draw(st.sampled_from([0, 300])),
    )
    s = healthy(cfg)
    if draw(st.booleans()):  # the device config changed after every component started
        s = edit(s, "configmaps", "volcano-vgpu-device-config", _changed_after_start)
    if draw(st.booleans()):  # no device config yet: a create
        kept = [c for c in s.configmaps if name_of(c) != "volcano-vgpu-device-config"]
        s = dataclasses.replace(s, configmaps=kept)
    if draw(st.booleans()):  # the node config as the manifest installed it
        s = edit(
            s,
            "configmaps",
            "volcano-vgpu-node-config",
            lambda cm: cm.update(data={"config.json": text("manifest_node_config.json")}),
        )
    if draw(st.booleans()):  # the scheduler conf as seed 000 wrote it by hand
        s = edit(
            s,
            "configmaps",
            "volcano-scheduler-configmap",
            lambda cm: cm.update(data={"volcano-scheduler.conf": text("seed000_scheduler.conf")}),
        )
    if draw(st.booleans()):
        s = edit(s, "daemonsets", PLUGIN[1], _without_placement)
    if draw(st.booleans()):  # a plugin that takes its settings from flags
        s = edit(s, "daemonsets", PLUGIN[1], _legacy)
    now = CHANGED + timedelta(seconds=draw(st.sampled_from([0, 3, 30, 400, 86400 * 3, 86400 * 3])))
    ledger: dict[str, datetime] = {}
    if draw(st.booleans()):
        ledger[SCHEDULER] = now - timedelta(seconds=draw(st.sampled_from([10, 1000])))
    if draw(st.booleans()):
        ledger[f"daemonset/{PLUGIN[0]}/{PLUGIN[1]}"] = now - timedelta(seconds=60)
    return s, now, ledger


def _normal(body: Any) -> Any:
    return json.loads(json.dumps(body, sort_keys=True)) if body is not None else None


def _object(method: str, path: str, body: Any) -> tuple[str, str, str, str]:
    """(verb, kind, namespace, name) of a request, from its path (a POST names its object in
    its body)."""
    parts = path.strip("/").split("/")
    namespace = parts[parts.index("namespaces") + 1]
    kind = {"configmaps": "ConfigMap", "daemonsets": "DaemonSet", "deployments": "Deployment"}
    plural = parts[-1] if method == "POST" else parts[-2]
    name = body["metadata"]["name"] if method == "POST" else parts[-1]
    return method, kind.get(plural, "Pod"), namespace, name


def _sent(s: ClusterSnapshot, now: datetime, ledger: dict[str, datetime]) -> list[Any]:
    settings_ = RestartSettings.from_config(s.config, 5.0)
    write_plan = plan_writes(s, now, ledger, settings_)
    with pytest.MonkeyPatch.context() as mp:
        api = FakeApi().install(mp)
        asyncio.run(execute(None, write_plan, now))  # type: ignore[arg-type]
    return [(*_object(c.method, c.path, c.body), _normal(c.body)) for c in api.calls]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_plan_json_lists_exactly_what_enforce_sends(
    case: tuple[ClusterSnapshot, datetime, dict[str, datetime]],
) -> None:
    s, now, ledger = case
    p = plan(s, [], now, ledger=ledger)
    writes = to_json(p, [])["writes"]
    node_writes = [w for w in writes if w["kind"] == "Node"]
    configuration = [w for w in writes if w["kind"] != "Node"]

    # the cluster enforce's configuration pass reads: the plan's node PATCHes applied
    patches = {w["name"]: w["body"] for w in node_writes}
    nodes = [
        apply_merge_patch(copy.deepcopy(n), patches[name_of(n)]) if name_of(n) in patches else n
        for n in s.nodes
    ]
    sent = _sent(dataclasses.replace(s, nodes=nodes), now, ledger)

    due_now = [w for w in configuration if w["due"] is None]
    assert sent == [
        (w["verb"], w["kind"], w["namespace"], w["name"], _normal(w["body"])) for w in due_now
    ]
    for w in configuration:  # what waits says until when, and is sent by no one now
        if w["due"] is not None:
            assert datetime.fromisoformat(w["due"].replace("Z", "+00:00")) > now

    # observe mode reports the same objects (a plugin pod's restart is said on its Node)
    observed = {(w.kind, w.namespace, w.name) for w in configuration_would_do(p)}
    pods_on = {r.name: r.action.node for r in p.restarts if r.action.node is not None}
    expected = {
        ("Node", "", pods_on[w["name"]])
        if w["kind"] == "Pod" and w["name"] in pods_on
        else (w["kind"], w["namespace"], w["name"])
        for w in configuration
        if not (w["verb"] == "DELETE" and w["name"] not in pods_on)  # OnDelete pods: its rollout
    }
    assert observed == expected


def test_the_generated_clusters_reach_every_kind_of_write() -> None:
    """The generator is not vacuous: among its cases are ConfigMap creates and PATCHes,
    DaemonSet PATCHes sent now and deferred, and restarts now and deferred."""
    seen: set[tuple[str, str, bool]] = set()

    @settings(max_examples=150, deadline=None, database=None)
    @given(clusters())
    def collect(case: tuple[ClusterSnapshot, datetime, dict[str, datetime]]) -> None:
        s, now, ledger = case
        w = plan_writes(s, now, ledger, RestartSettings.from_config(s.config, 5.0))
        seen.update(("ConfigMap", c.verb, False) for c in w.configmaps)
        seen.update((p.kind, p.verb, p.due is not None) for p in w.workloads)
        seen.update(("restart", r.verb, r.due is not None) for r in w.restarts)

    collect()
    assert seen >= {
        ("ConfigMap", "POST", False),
        ("ConfigMap", "PATCH", False),
        ("DaemonSet", "PATCH", False),
        ("DaemonSet", "PATCH", True),
        ("restart", "PATCH", False),
        ("restart", "PATCH", True),
    }
