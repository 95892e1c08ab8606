"""The configuration reconciler's pure seams: what the restart planner is given, read off a
snapshot; which watched objects wake it; what node events wake it; the condition a policy
gets before and after the first check."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from tests.kit.volcano_fixtures import T_CHANGED, T_CREATED, T_STARTED, edit, healthy
from vgpu_operator import contract
from vgpu_operator.controller.app import Controller, Settings
from vgpu_operator.controller.node_writes import _written
from vgpu_operator.controller.volcano import VolcanoOptions, VolcanoReconciler
from vgpu_operator.core.findings import CONDITION
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.rules.base import Finding, ObjectRef
from vgpu_operator.core.volcano.restarts import (
    RESTARTED_AT,
    RestartAction,
    RestartSettings,
    plan_restarts,
    restart_inputs,
)
from vgpu_operator.core.volcano.writes import installed, on_delete_pods, released_configs
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.volcano import REGISTER_ANNOTATION


def t(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def reconciler(config: OperatorConfig | None = None) -> VolcanoReconciler:
    no_api: Any = None  # these tests make no request
    return VolcanoReconciler(
        api=no_api, config=config or OperatorConfig(), post_event=lambda *_: None
    )


def test_restart_inputs_of_a_consistent_cluster_need_no_restart() -> None:
    snap = healthy()
    inputs = restart_inputs(snap)
    assert inputs.scheduler is not None and inputs.plugin is not None
    assert inputs.scheduler.pod_starts == (t(T_STARTED),)
    assert sorted(p.node for p in inputs.plugin_pods) == ["gpu-a", "gpu-b"]
    assert inputs.plugin_reads_changed == t(T_CHANGED)
    # gpu-a's entry says what its plugin used without one: taken over unchanged, its time the
    # ConfigMap's last change before (its creation here) (core.volcano.config_adoption)
    assert inputs.node_entries_changed == {"gpu-a": t(T_CREATED), "gpu-b": t(T_CHANGED)}
    plan = plan_restarts(inputs, {}, RestartSettings(), t("2026-02-01T00:00:00Z"))
    assert plan.actions == ()


def test_restart_inputs_see_a_stale_plugin_and_a_rollout_under_way() -> None:
    snap = edit(
        healthy(),
        "pods",
        "volcano-device-plugin-gpu-a",
        lambda p: p["status"].update(startTime="2026-01-01T12:00:00Z"),
    )
    snap = edit(
        snap,
        "deployments",
        "volcano-scheduler",
        lambda d: (
            d["spec"]["template"]
            .setdefault("metadata", {})
            .update(annotations={RESTARTED_AT: "2026-01-05T00:00:00Z"})
        ),
    )
    inputs = restart_inputs(snap)
    assert inputs.scheduler is not None
    assert inputs.scheduler.restarted_at == t("2026-01-05T00:00:00Z")
    plan = plan_restarts(inputs, {}, RestartSettings(), t("2026-02-01T00:00:00Z"))
    assert [(a.kind, a.name) for a in plan.actions] == [
        ("rollout-daemonset", "volcano-device-plugin")
    ]


def test_restart_inputs_count_the_operators_edit_of_the_scheduler_conf() -> None:
    snap = edit(
        healthy(),
        "configmaps",
        "volcano-scheduler-configmap",
        lambda c: c["metadata"]["annotations"].update(
            {contract.ANN_DATA_CHANGED_AT: "2026-01-04T00:00:00Z"}
        ),
    )
    inputs = restart_inputs(snap)
    assert inputs.scheduler_reads_changed == t("2026-01-04T00:00:00Z")
    plan = plan_restarts(inputs, {}, RestartSettings(), t("2026-02-01T00:00:00Z"))
    assert [a.kind for a in plan.actions] == ["rollout-deployment"]


def test_what_is_installed_and_managed() -> None:
    snap = healthy()
    assert installed(snap)
    assert set(released_configs(snap)) == {"gpu-a", "gpu-b"}
    bare = edit(
        snap, "nodes", "gpu-a", lambda n: n["metadata"]["annotations"].pop(contract.ANN_CONFIG)
    )
    assert set(released_configs(bare)) == {"gpu-b"}
    empty = type(snap)(config=snap.config, nodes=snap.nodes)
    assert not installed(empty)


def test_watch_filter_names_the_objects_the_rules_read() -> None:
    r = reconciler()
    assert r.watches("ConfigMap", "kube-system", "volcano-vgpu-device-config")
    assert r.watches("ConfigMap", "volcano-system", "volcano-scheduler-configmap")
    assert not r.watches("ConfigMap", "kube-system", "coredns")
    assert r.watches("DaemonSet", "kube-system", "volcano-device-plugin")
    assert not r.watches("DaemonSet", "kube-system", "kube-proxy")
    assert r.watches("Deployment", "volcano-system", "volcano-scheduler")
    assert not r.watches("Deployment", "volcano-system", "volcano-admission")
    r._scheduler_device = ("team", "my-device-config")  # what the scheduler conf points at
    assert r.watches("ConfigMap", "team", "my-device-config")


def test_node_events_wake_it_only_when_the_registration_changes() -> None:
    r = reconciler()

    def body(register: str | None, alloc: str = "20") -> dict[str, Any]:
        ann = {REGISTER_ANNOTATION: register} if register is not None else {}
        return {
            "metadata": {"annotations": ann},
            "status": {"allocatable": {"volcano.sh/vgpu-number": alloc}},
        }

    r.node_changed("n", body(None))
    assert not r._wake.is_set()  # a node without a plugin, first seen
    r.node_changed("n", body("GPU-1,10,24564,NVIDIA-x,true,hami-core:"))
    assert r._wake.is_set()
    r._wake.clear()
    r.node_changed("n", body("GPU-1,10,24564,NVIDIA-x,true,hami-core:"))
    assert not r._wake.is_set()  # a heartbeat
    r.node_changed("n", body("GPU-1,10,24564,NVIDIA-x,true,hami-core:", alloc="10"))
    assert r._wake.is_set()
    r._wake.clear()
    r.node_changed("n", {}, deleted=True)
    assert r._wake.is_set()


def test_a_pass_says_when_its_findings_changed() -> None:
    """The end of each pass tells the controller whether the findings changed (it then asks
    for the policies' ConfigConsistent condition again)."""
    r = reconciler()
    snap = healthy()
    finding = Finding(
        id="node-registration",
        severity="error",
        objects=(ObjectRef(kind="Node", name="gpu-a"),),
        message="m",
        fix="f",
    )
    assert r._report(snap, []) is True  # the first pass: nothing was known
    assert r._report(snap, []) is False
    assert r._report(snap, [finding]) is True
    assert r._report(snap, [finding]) is False


def _controller(volcano: bool = True) -> Controller:
    settings = Settings(credentials=Credentials(), volcano=VolcanoOptions(enabled=volcano))
    return Controller(settings, api=None)  # type: ignore[arg-type]  # makes no request


def test_policy_condition_before_and_after_the_first_check() -> None:
    state = _controller()
    condition = state.reconciler.status_writer.configuration_condition
    assert condition("p", frozenset()) == {}  # nothing known, nothing stored

    stored = {"conditions": [{"type": CONDITION, "status": "False", "reason": "R", "message": "m"}]}
    state.cache.policies.index = {"p": [SimpleNamespace(status=stored)]}  # as Kopf's index holds it
    # before the first check the policy keeps what it has: no status write for the wait
    assert condition("p", frozenset()) == {CONDITION: ("False", "R", "m")}
    assert state.configuration is not None  # what the configuration reconciler publishes
    state.configuration.findings = [
        Finding(
            id="node-registration",
            severity="error",
            objects=(ObjectRef(kind="Node", name="other"),),
            message="m",
            fix="f",
        )
    ]
    assert condition("p", frozenset({"mine"}))[CONDITION][0] == "True"
    assert condition("p", frozenset({"other"}))[CONDITION][0] == "False"
    off = _controller(volcano=False).reconciler.status_writer
    assert off.configuration_condition("p", frozenset()) == {}


def test_an_on_delete_daemonset_is_restarted_by_deleting_its_pods() -> None:
    action = RestartAction("rollout-daemonset", "kube-system", "volcano-device-plugin", "k", "r")
    snap = healthy()
    assert on_delete_pods(snap, action) == []  # RollingUpdate: the template change does it
    on_delete = edit(
        snap,
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"].update(updateStrategy={"type": "OnDelete"}),
    )
    assert sorted(on_delete_pods(on_delete, action)) == [
        "volcano-device-plugin-gpu-a",
        "volcano-device-plugin-gpu-b",
    ]
    other = RestartAction("rollout-deployment", "volcano-system", "volcano-scheduler", "k", "r")
    assert on_delete_pods(on_delete, other) == []


async def _passes_while(busy_for: float, max_defer: float) -> list[float]:
    """Start the loop with Nodes being written for `busy_for` seconds; when passes began."""
    start = time.monotonic()
    no_api: Any = None
    idle = asyncio.Event()  # Nodes are being written until busy_for has passed
    r = VolcanoReconciler(
        api=no_api,
        config=OperatorConfig(),
        post_event=lambda *_: None,
        options=VolcanoOptions(
            debounce_seconds=0.01, min_pass_seconds=0, max_defer_seconds=max_defer
        ),
        nodes_idle=idle,
    )
    asyncio.get_running_loop().call_later(busy_for, idle.set)
    began: list[float] = []

    async def one_pass() -> None:
        began.append(time.monotonic() - start)

    r.reconcile = one_pass  # type: ignore[method-assign]
    task = asyncio.create_task(r.run())
    await asyncio.sleep(busy_for + 0.5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return began


async def test_a_configuration_pass_waits_while_nodes_are_being_written() -> None:
    began = await _passes_while(busy_for=0.6, max_defer=10)
    assert len(began) == 1 and began[0] >= 0.6


async def test_a_configuration_pass_waits_no_longer_than_max_defer() -> None:
    began = await _passes_while(busy_for=5, max_defer=0.3)
    assert len(began) == 1 and 0.3 <= began[0] < 1.0


def test_facts_after_a_metadata_only_write_take_the_patch_taints_or_keep_them() -> None:
    before = node_facts(
        {
            "metadata": {"name": "n", "resourceVersion": "5", "labels": {"u": "1"}},
            "spec": {"taints": [{"key": "user", "effect": "NoSchedule"}]},
        }
    )
    response = {"metadata": {"name": "n", "resourceVersion": "6", "labels": {"u": "1", "a": "b"}}}
    # a patch without taints: the user's taint is still there
    kept = node_facts(_written(response, {"metadata": {"labels": {"a": "b"}}}, before))
    assert kept.taints == ({"key": "user", "effect": "NoSchedule"},)
    assert kept.resource_version == "6" and kept.labels == {"u": "1", "a": "b"}
    # a patch that sets the list: the list is the patch's
    ours = [{"key": "user", "effect": "NoSchedule"}, {"key": "v", "effect": "NoSchedule"}]
    replaced = node_facts(_written(response, {"spec": {"taints": ours}}, before))
    assert list(replaced.taints) == ours
    # an apiserver that answers with the whole Node: taken as it is
    full = {**response, "spec": {"taints": []}}
    assert node_facts(_written(full, {"metadata": {}}, before)).taints == ()


async def test_finding_events_are_sent_in_batches_without_another_pass() -> None:
    """A finding on every node is one Event per node: `events_per_batch` are sent at once and
    as many again every `event_batch_seconds`, from the pass's own findings (a pass over 1,000
    nodes that asked for another pass per batch kept the rules worker busy for minutes,
    bench/idle.py); a newer pass drops the Events of what it no longer finds."""
    sent: list[str] = []
    r = VolcanoReconciler(
        api=None,  # type: ignore[arg-type]  # makes no request
        config=OperatorConfig(),
        post_event=lambda ref, _type, _reason, _message: sent.append(ref["metadata"]["name"]),
        options=VolcanoOptions(events_per_batch=2, event_batch_seconds=0.05),
    )
    snap = healthy()
    names = [str(n["metadata"]["name"]) for n in snap.nodes]
    for node in snap.nodes:
        node["metadata"]["uid"] = f"uid-{node['metadata']['name']}"  # Events go to real objects
    assert len(names) >= 2
    found = [
        Finding(
            id="node-registration",
            severity="error",
            objects=(ObjectRef(kind="Node", name=name),),
            message=f"m {name}",
            fix="f",
        )
        for name in names
    ]
    extra = Finding(
        id="node-registration",
        severity="error",
        objects=tuple(ObjectRef(kind="Node", name=name) for name in names),
        message="all",
        fix="f",
    )
    r._report(snap, [*found, extra])
    assert len(sent) == 2 and r.passes == 0
    r._report(snap, found)  # `extra` fixed before its Events went out: they are dropped
    for _ in range(100):
        if r._sender is None:
            break
        await asyncio.sleep(0.02)
    assert sorted(sent) == sorted(names)
    assert not r._timers  # no pass was asked for
    r.stop()
