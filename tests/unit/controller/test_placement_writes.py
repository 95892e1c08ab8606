"""The configuration reconciler writes the plugin DaemonSet's placement (`enforce_configuration`
against a recording stand-in apiserver): one PATCH that is also the rollout, with the plugin args
it owns, recorded for `cleanup`, deferred within the restart interval and until what the plugin
reads has settled, and never over a placement the user chose."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.kit.fakeapi import FakeApi
from tests.kit.volcano_fixtures import edit, healthy, text
from vgpu_operator import contract
from vgpu_operator.controller.volcano_writes import enforce_configuration
from vgpu_operator.core.volcano.restarts import RestartSettings, daemonset_key
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.placement import PlacementRecord

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
PLACE = contract.LABEL_DEVICE_PLUGIN


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return FakeApi().install(monkeypatch)


def daemonset_patches(fake: FakeApi) -> list[dict[str, Any]]:
    return [b for b in fake.bodies("PATCH", r".*/daemonsets/[^/]+") if b]


def shipped_cluster() -> ClusterSnapshot:
    def ship(ds: dict[str, Any]) -> None:
        spec = ds["spec"]["template"]["spec"]
        spec.pop("nodeSelector")
        spec["tolerations"].pop()
        ds["metadata"]["resourceVersion"] = "7"

    return edit(healthy(), "daemonsets", "volcano-device-plugin", ship)


async def test_enforce_writes_the_placement_once_as_a_restart(fake: FakeApi) -> None:
    _, result = await enforce_configuration(
        None, shipped_cluster(), T0, None, {}, RestartSettings()
    )
    [body] = daemonset_patches(fake)
    assert body["metadata"]["resourceVersion"] == "7"
    spec = body["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {PLACE: "hami"}
    added = {"key": "volcano.sh/vgpu", "operator": "Equal", "value": "hami", "effect": "NoSchedule"}
    assert spec["tolerations"][-1] == added
    # the same PATCH records what it set, for `cleanup` (core.cleanup.placement_revert)
    record = body["metadata"]["annotations"][contract.ANN_PLACEMENT]
    assert PlacementRecord.from_annotation(record) == PlacementRecord(
        node_selector={PLACE: "hami"}, tolerations=[added]
    )
    assert result.rolled == [("DaemonSet", "kube-system", "volcano-device-plugin")]
    assert [w.what for w in result.written if w.kind == "DaemonSet"] == [
        f"placement: nodeSelector {PLACE}=hami, toleration volcano.sh/vgpu=hami:NoSchedule"
    ]


async def test_enforce_defers_the_placement_within_the_restart_interval(fake: FakeApi) -> None:
    key = daemonset_key("kube-system", "volcano-device-plugin")
    ledger = {key: T0 - timedelta(seconds=60)}
    settings = RestartSettings(min_interval=timedelta(seconds=300))
    plan, result = await enforce_configuration(None, shipped_cluster(), T0, None, ledger, settings)
    assert daemonset_patches(fake) == []
    assert result.rolled == [] and plan.wake_at(T0) == T0 + timedelta(seconds=240)
    not_allowed = RestartSettings(allowed=False)
    plan, result = await enforce_configuration(None, shipped_cluster(), T0, None, {}, not_allowed)
    assert daemonset_patches(fake) == [] and plan.wake_at(T0) is None


async def test_args_and_placement_go_in_one_patch(fake: FakeApi) -> None:
    def v1_11(ds: dict[str, Any]) -> None:
        c = ds["spec"]["template"]["spec"]["containers"][0]
        c["image"] = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.11.0"

    snap = edit(shipped_cluster(), "daemonsets", "volcano-device-plugin", v1_11)
    await enforce_configuration(None, snap, T0, None, {}, RestartSettings())
    [body] = daemonset_patches(fake)
    spec = body["spec"]["template"]["spec"]
    assert set(spec) == {"containers", "nodeSelector", "tolerations"}
    assert "--device-split-count=10" in spec["containers"][0]["args"]
    # a flag whose plugin default is the configured value is not added
    # (core.volcano.config_adoption)
    assert "--gpu-memory-factor=1" not in spec["containers"][0]["args"]


async def test_a_daemonset_patch_waits_until_what_the_plugin_reads_settles(fake: FakeApi) -> None:
    # a pod the rollout starts in the second of a ConfigMap change could have read the old
    # content (start times are whole seconds), and would count as stale for good
    def stale_entries(cm: dict[str, Any]) -> None:
        cm["data"] = {"config.json": text("manifest_node_config.json")}

    snap = edit(shipped_cluster(), "configmaps", "volcano-vgpu-node-config", stale_entries)
    settings = RestartSettings(settle=timedelta(seconds=5))
    plan, _ = await enforce_configuration(None, snap, T0, None, {}, settings)
    assert fake.sent() == [("PATCH", "volcano-vgpu-node-config")]
    assert plan.pending(T0) == {("kube-system", "volcano-device-plugin")}
    assert plan.wake_at(T0) == T0 + timedelta(seconds=6)  # the next second, + settle


async def test_enforce_leaves_a_daemonset_the_user_placed_elsewhere(fake: FakeApi) -> None:
    snap = edit(
        shipped_cluster(),
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"].update(nodeSelector={"gpu": "on"}),
    )
    _, result = await enforce_configuration(None, snap, T0, None, {}, RestartSettings())
    assert daemonset_patches(fake) == [] and result.rolled == []
