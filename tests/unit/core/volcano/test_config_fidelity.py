"""What Volcano and HAMi really do with the rendered configuration (issue 11): one test group per
item of its Build list. Each test states what the project did at commit c5c2959 that it rejects."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.kit.nodekit import labels_of, node, policy, reconcile
from tests.kit.volcano_fixtures import (
    configmap,
    deployment,
    edit,
    findings,
    gpu_node,
    healthy,
    obj,
    pod,
    replace,
    text,
)
from vgpu_devcluster import upstream
from vgpu_devcluster.fakeplugin import simulate_registration
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.volcano_writes import enforce_configuration
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.geometry import (
    ReportedGpuModel,
    ReportedProfile,
    build_known_geometries,
)
from vgpu_operator.core.volcano.placement import placements, plan_placement
from vgpu_operator.core.volcano.render import render_ascend_node_config, render_node_config
from vgpu_operator.core.volcano.render.plugin_args import desired_flags
from vgpu_operator.core.volcano.restarts import RestartSettings, daemonset_key, rollout_due
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.placement import PlacementRecord
from vgpu_operator.models.policy_modes import HamiCoreSpec, MigLayout, MigSpec
from vgpu_operator.models.volcano_views import Version

NOW = "2026-02-01T00:00:00Z"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
PLACE = contract.LABEL_DEVICE_PLUGIN
STATIC = NodeConfig(
    mode="mig",
    policy="h100-static-mig",
    generation=1,
    mig=MigSpec(partitioning="static", layout=[MigLayout(profiles={"1g.10gb": 7})]),
)
DYNAMIC = NodeConfig(mode="mig", policy="a100-dynamic-mig", generation=1)
HAMI = NodeConfig(mode="hami-core", policy="rtx4090-hami-core", generation=1)
NVIDIA_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"


def node_entries(cm_data: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(cm_data["config.json"])["nodeconfig"]}


# --- 1. static MIG belongs to NVIDIA's plugin -----------------------------------------------


def test_a_static_mig_nodes_entry_filters_every_gpu() -> None:
    # c5c2959: {"name": "h100-0", "operatingmode": "mig", "filterdevices": {"index": []}, ...}
    released = {"h100-0": STATIC, "a100-0": DYNAMIC}
    out = render_node_config(None, released, OperatorConfig(), NOW, {"h100-0": list(range(8))})
    got = node_entries(out.data)
    assert got["h100-0"]["operatingmode"] == "hami-core"
    assert got["h100-0"]["filterdevices"] == {"uuid": [], "index": [0, 1, 2, 3, 4, 5, 6, 7]}
    assert got["a100-0"]["operatingmode"] == "mig"  # dynamic MIG stays HAMi's
    assert got["a100-0"]["filterdevices"] == {"uuid": [], "index": []}
    # GPUs not known yet: every index a policy may name
    unknown = node_entries(render_node_config(None, released, OperatorConfig(), NOW).data)
    assert unknown["h100-0"]["filterdevices"]["index"] == list(range(64))


def test_a_stray_plugin_pod_on_a_static_node_registers_nothing() -> None:
    h100 = gpu_node("h100-0", "H100-80GB-HBM3", 8, released=STATIC, tainted=False)
    out = render_node_config(None, {"h100-0": STATIC}, OperatorConfig(), NOW, {"h100-0": None})
    reg = simulate_registration(
        h100,
        out.data["config.json"],
        text("manifest_device_config.yaml"),
        version=Version(1, 12, 0),
    )
    assert reg.gpus == [] and reg.mode == "hami-core"


def static_pool(snapshot: ClusterSnapshot | None = None) -> ClusterSnapshot:
    """The healthy cluster plus the demo's static H100 pool: no taint, no label, NVIDIA's own
    device plugin running there with a MIG strategy, its node-config entry rendered."""
    snap = snapshot or healthy()
    h100 = gpu_node("h100-0", "H100-80GB-HBM3", 8, released=STATIC, tainted=False)
    snap = replace(
        snap,
        nodes=[*snap.nodes, h100],
        pods=[
            *snap.pods,
            pod(
                "kube-system",
                "nvidia-device-plugin-daemonset-h100",
                node="h100-0",
                labels={"app": "nvidia-device-plugin-daemonset"},
                image=NVIDIA_PLUGIN_IMAGE,
            ),
        ],
    )

    def rerender(cm: dict[str, Any]) -> None:
        released = {n["metadata"]["name"]: snap.released(n) for n in snap.nodes}
        rendered = render_node_config(cm, released, snap.config, NOW, snap.gpus_by_node)
        cm["data"] = rendered.data
        cm["metadata"]["annotations"].update(rendered.annotations)

    return edit(snap, "configmaps", "volcano-vgpu-node-config", rerender)


def test_a_static_pool_raises_no_error() -> None:
    # c5c2959, as the review probed it: plugin-placement, scheduler-default-resource-names,
    # node-registration, mig-geometry-coverage and nvidia-device-plugin-conflict all errors, the
    # last one suggesting disableNvidiaDevicePlugin: true, which the CRD forbids for static MIG
    snap = static_pool(replace(healthy(), deployments=[deployment("v1.15.1")]))
    results = run_rules(snap)
    worse = [(f.id, f.message) for f in results.findings if f.severity != "info"]
    assert worse == []
    assert {f.id for f in results.findings} == {"version-handshake"}  # v1.12.0 with v1.15.1
    assert [n["metadata"]["name"] for n in snap.vgpu_nodes] == ["gpu-a", "gpu-b"]
    assert [n["metadata"]["name"] for n in snap.mig_nodes] == ["gpu-b"]


def test_fixes_for_an_nvidia_plugin_on_a_vgpu_node_are_ones_the_crd_allows() -> None:
    snap = static_pool()
    snap = replace(
        snap,
        pods=[
            *snap.pods,
            pod(
                "kube-system",
                "nvidia-device-plugin-daemonset-a",
                node="gpu-a",
                labels={"app": "nvidia-device-plugin-daemonset"},
                image=NVIDIA_PLUGIN_IMAGE,
            ),
        ],
    )
    got = findings(snap, "nvidia-device-plugin-conflict")
    assert [f.objects[1].name for f in got] == ["gpu-a"]  # not h100-0: static MIG is NVIDIA's


# --- 2. plugin placement ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "label"),
    [
        ({"mode": "hami-core"}, "hami"),
        ({"mode": "mig"}, "hami"),
        ({"mode": "mig", "mig": {"partitioning": "dynamic"}}, "hami"),
        ({"mode": "ascend-vnpu"}, "ascend"),
        (
            {
                "mode": "mig",
                "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
            },
            None,
        ),
        ({"mode": "whole-gpu"}, None),
    ],
)
def test_the_node_planner_writes_the_device_plugin_label(
    spec: dict[str, Any], label: str | None
) -> None:
    # c5c2959 wrote no such label: the plugin DaemonSets had nothing to select on
    selector = {"nodeSelector": {"matchLabels": {"pool": "a"}}}
    both = node("n1", {"pool": "a", contract.ASCEND_CHIP_LABEL: "910B3"})  # GPUs and NPUs
    nodes, _ = reconcile([both], [policy("p", {**spec, **selector})])
    assert labels_of(nodes[0]).get(PLACE) == label
    again, _ = reconcile(nodes, [])  # the policy is gone: the label goes with it
    assert PLACE not in labels_of(again[0])


def test_a_users_own_device_plugin_label_is_the_operators_to_correct() -> None:
    nodes, _ = reconcile([node("n1", {"pool": "a", PLACE: "hami"})], [])
    assert PLACE not in labels_of(nodes[0])


def shipped_daemonset() -> dict[str, Any]:
    ds = obj("manifest_plugin_daemonset.yaml")
    ds["metadata"]["resourceVersion"] = "7"
    return ds


def custom_taint_cluster() -> list[dict[str, Any]]:
    """Nodes as the planner leaves them: one pool with the default taint, one with custom
    nodeTaints (NoSchedule, NoExecute and a PreferNoSchedule that blocks nothing)."""
    custom = [
        {"key": "example.com/gpu-pool", "value": "rtx", "effect": "NoSchedule"},
        {"key": "example.com/dedicated", "effect": "NoExecute"},
        {"key": "example.com/soft", "value": "x", "effect": "PreferNoSchedule"},
    ]
    policies = [
        policy("a", {"mode": "mig", "nodeSelector": {"matchLabels": {"pool": "a"}}}),
        policy(
            "b",
            {
                "mode": "hami-core",
                "nodeSelector": {"matchLabels": {"pool": "b"}},
                "nodeTaints": custom,
                "allowNoExecute": True,
            },
        ),
        policy(
            "c",
            {
                "mode": "mig",
                "nodeSelector": {"matchLabels": {"pool": "c"}},
                "mig": {"partitioning": "static", "layout": [{"profiles": {"1g.10gb": 7}}]},
                "nodeTaints": [],  # as the demo's static pool
            },
        ),
    ]
    linux = {"kubernetes.io/os": "linux"}
    nodes = [
        node("a-0", {"pool": "a", **linux}),
        node("b-0", {"pool": "b", **linux}, gpu="rtx4090"),
        node("c-0", {"pool": "c", **linux}, gpu="h100"),
        node("cpu-0", linux, gpu="cpu"),
    ]
    nodes, _ = reconcile(nodes, policies)
    return nodes


def test_the_placement_tolerates_every_policy_taint_and_keeps_the_users() -> None:
    ds = shipped_daemonset()
    spec = ds["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
    spec["tolerations"].append({"key": "user.example/x", "operator": "Exists"})
    p = plan_placement(ds, "hami", custom_taint_cluster())
    assert p.served == ("a-0", "b-0")
    assert p.extra == ("c-0", "cpu-0")  # static MIG and CPU: untainted, reached today
    assert [n for n, _ in p.unreached] == ["a-0", "b-0"]
    assert p.patch == {
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {PLACE: "hami"},  # merged: kubernetes.io/os stays
                    "tolerations": [
                        *spec["tolerations"],
                        {
                            "key": "example.com/dedicated",
                            "operator": "Exists",
                            "effect": "NoExecute",
                        },
                        {
                            "key": "example.com/gpu-pool",
                            "operator": "Equal",
                            "value": "rtx",
                            "effect": "NoSchedule",
                        },
                        {
                            "key": "volcano.sh/vgpu",
                            "operator": "Equal",
                            "value": "hami",
                            "effect": "NoSchedule",
                        },
                    ],
                }
            }
        }
    }
    assert p.still_unreached == ()
    # applied (nodeSelector merged, tolerations replaced): nothing left to write
    patched = copy.deepcopy(ds)
    pod_spec = patched["spec"]["template"]["spec"]
    pod_spec["nodeSelector"].update(p.patch["spec"]["template"]["spec"]["nodeSelector"])
    pod_spec["tolerations"] = p.patch["spec"]["template"]["spec"]["tolerations"]
    again = plan_placement(patched, "hami", custom_taint_cluster())
    assert again.patch is None and again.unreached == () and again.extra == ()


def test_a_toleration_the_user_already_has_is_not_added_again() -> None:
    ds = shipped_daemonset()
    ds["spec"]["template"]["spec"]["tolerations"].append({"operator": "Exists"})  # all taints
    p = plan_placement(ds, "hami", custom_taint_cluster())
    assert p.patch == {"spec": {"template": {"spec": {"nodeSelector": {PLACE: "hami"}}}}}


def test_the_ascend_plugin_is_placed_only_when_ascend_is_enabled() -> None:
    snap = healthy()
    snap = replace(snap, daemonsets=[*snap.daemonsets, ascend_daemonset()])
    assert [p.plugin for p in placements(snap)] == ["hami"]
    on = replace(snap, config=load_config("ascendVnpu: {enabled: true}"))
    assert [p.plugin for p in placements(on)] == ["hami", "ascend"]


def test_nothing_is_placed_before_the_operator_manages_a_node() -> None:
    snap = healthy()
    for n in snap.nodes:
        n["metadata"]["annotations"].pop(contract.ANN_CONFIG)
    assert placements(snap) == []


def test_a_placement_rollout_waits_for_the_restart_limits() -> None:
    settings = RestartSettings(min_interval=timedelta(seconds=300))
    key = daemonset_key("kube-system", "volcano-device-plugin")
    assert rollout_due({}, key, None, settings, T0) == T0
    last = T0 - timedelta(seconds=100)
    assert rollout_due({key: last}, key, None, settings, T0) == T0 + timedelta(seconds=200)
    assert rollout_due({}, key, last, settings, T0) == T0 + timedelta(seconds=200)
    assert rollout_due({}, key, None, RestartSettings(allowed=False), T0) is None


class FakeApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any] | None]] = []

    async def request(
        self, _api: Any, method: str, path: str, body: Any = None, **_: Any
    ) -> dict[str, Any]:
        self.calls.append((method, path, body))
        return {"metadata": {"name": path.rsplit("/", 1)[-1], "uid": "u"}}

    def daemonset_patches(self) -> list[dict[str, Any]]:
        return [b for m, p, b in self.calls if m == "PATCH" and "/daemonsets/" in p and b]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = FakeApi()
    monkeypatch.setattr(kubeapi, "request", api.request)
    return api


def shipped_cluster() -> ClusterSnapshot:
    def ship(ds: dict[str, Any]) -> None:
        spec = ds["spec"]["template"]["spec"]
        spec.pop("nodeSelector")
        spec["tolerations"].pop()
        ds["metadata"]["resourceVersion"] = "7"

    return edit(healthy(), "daemonsets", "volcano-device-plugin", ship)


async def test_enforce_writes_the_placement_once_as_a_restart(fake: FakeApi) -> None:
    # c5c2959 never wrote to the DaemonSet's placement
    result = await enforce_configuration(None, shipped_cluster(), T0, None, {}, RestartSettings())
    [body] = fake.daemonset_patches()
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
    result = await enforce_configuration(None, shipped_cluster(), T0, None, ledger, settings)
    assert fake.daemonset_patches() == []
    assert result.rolled == [] and result.rollout_wait == T0 + timedelta(seconds=240)
    not_allowed = RestartSettings(allowed=False)
    result = await enforce_configuration(None, shipped_cluster(), T0, None, {}, not_allowed)
    assert fake.daemonset_patches() == [] and result.rollout_wait is None


async def test_args_and_placement_go_in_one_patch(fake: FakeApi) -> None:
    def v1_11(ds: dict[str, Any]) -> None:
        c = ds["spec"]["template"]["spec"]["containers"][0]
        c["image"] = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.11.0"

    snap = edit(shipped_cluster(), "daemonsets", "volcano-device-plugin", v1_11)
    await enforce_configuration(None, snap, T0, None, {}, RestartSettings())
    [body] = fake.daemonset_patches()
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
    result = await enforce_configuration(None, snap, T0, None, {}, settings)
    assert [(m, p.rsplit("/", 1)[1]) for m, p, _ in fake.calls] == [
        ("PATCH", "volcano-vgpu-node-config")
    ]
    assert result.pending == {("kube-system", "volcano-device-plugin")}
    assert result.rollout_wait == T0 + timedelta(seconds=6)  # the next second, + settle


async def test_enforce_leaves_a_daemonset_the_user_placed_elsewhere(fake: FakeApi) -> None:
    snap = edit(
        shipped_cluster(),
        "daemonsets",
        "volcano-device-plugin",
        lambda d: d["spec"]["template"]["spec"].update(nodeSelector={"gpu": "on"}),
    )
    result = await enforce_configuration(None, snap, T0, None, {}, RestartSettings())
    assert fake.daemonset_patches() == [] and result.rolled == []


# --- 4. Ascend: --node_config_file and explicit hami-vnpu-core -------------------------------


def ascend_daemonset() -> dict[str, Any]:
    """HAMi's Ascend plugin DaemonSet, as v1.4.0 ships it."""
    [ds] = upstream.FILES["hami-ascend-v1.4.0-ascend-device-plugin.yaml"].documents()[3:]
    assert ds["kind"] == "DaemonSet"
    return ds


def ascend_cluster(args: list[str] | None = None) -> ClusterSnapshot:
    cfg = load_config("ascendVnpu: {enabled: true}")
    snap = healthy(cfg)
    npu = gpu_node("npu-0", "RTX-4090", 0, released=NodeConfig(mode="ascend-vnpu"))
    ds = ascend_daemonset()
    if args is not None:
        ds["spec"]["template"]["spec"]["containers"][0]["args"] = args
    return replace(snap, nodes=[*snap.nodes, npu], daemonsets=[*snap.daemonsets, ds])


def test_the_ascend_plugin_must_read_the_node_config_it_mounts() -> None:
    # c5c2959: no rule; the shipped DaemonSet mounts /node-config.yaml but never passes the flag
    shipped = ascend_daemonset()["spec"]["template"]["spec"]
    assert "--node_config_file" not in " ".join(shipped["containers"][0]["args"])
    [got] = findings(ascend_cluster(), "ascend-node-config-file")
    assert got.severity == "error"
    assert got.message.startswith(
        "container device-plugin runs without --node_config_file: hami-device-node-config is "
        "mounted at /node-config.yaml but never read"
    )
    assert (
        got.fix == "add --node_config_file=/node-config.yaml to the args of container device-plugin"
    )
    fixed = ["--config_file", "/device-config.yaml", "--node_config_file=/node-config.yaml"]
    assert findings(ascend_cluster(fixed), "ascend-node-config-file") == []
    elsewhere = ["--config_file", "/device-config.yaml", "-node_config_file", "/etc/x.yaml"]
    [wrong] = findings(ascend_cluster(elsewhere), "ascend-node-config-file")
    assert wrong.message.startswith("--node_config_file is /etc/x.yaml")
    # no ascend-vnpu node, no per-node config rendered: nothing to read
    no_nodes = replace(ascend_cluster(), nodes=healthy().nodes)
    assert findings(no_nodes, "ascend-node-config-file") == []


def test_every_ascend_entry_carries_hami_vnpu_core() -> None:
    # c5c2959: {"name": "npu-0"} only: the plugin then reads hami-vnpu-core as false, overriding
    # a global vnpus.hamiVnpuCore: true
    released = {
        "npu-0": NodeConfig(mode="ascend-vnpu"),
        "npu-1": NodeConfig(mode="ascend-vnpu", ascendVnpu={"hamiVnpuCore": False}),
    }
    out = render_ascend_node_config(None, released, OperatorConfig(), NOW, hami_vnpu_core=True)
    text_ = out.data["node-config.yaml"]
    assert "- name: npu-0\n  hami-vnpu-core: true\n" in text_
    assert "- name: npu-1\n  hami-vnpu-core: false\n" in text_


def with_scheduler_device(core: bool) -> ClusterSnapshot:
    cfg = load_config("ascendVnpu: {enabled: true}")
    device = f"vnpus:\n  hamiVnpuCore: {'true' if core else 'false'}\n  configs: []\n"
    cm = configmap("kube-system", "hami-scheduler-device", {"device-config.yaml": device})
    return replace(healthy(cfg), configmaps=[*healthy(cfg).configmaps, cm])


def test_the_global_hami_vnpu_core_comes_from_the_ascend_plugins_configmap() -> None:
    assert with_scheduler_device(True).hami_vnpu_core is True
    assert with_scheduler_device(False).hami_vnpu_core is False
    assert healthy().hami_vnpu_core is False  # no such ConfigMap: the plugin's default


# --- 5. the MIG catalog is validated ----------------------------------------------------------


def catalog(group: str, geometries: str, models: str = '["A100-SXM4-80GB"]') -> str:
    return (
        "migGeometries:\n  catalog:\n"
        f"  - models: {models}\n"
        f"    allowedGeometries:\n    - group: {group}\n      geometries: {geometries}\n"
    )


@pytest.mark.parametrize("group", ["all-1g", '"g,2"', '"g:1"', '"g;1"', '"g[1]"', '"a b"'])
def test_a_group_name_the_scheduler_cannot_encode_is_refused(group: str) -> None:
    # c5c2959 accepted all of these
    with pytest.raises(ConfigError) as err:
        load_config(catalog(group, "[{name: 1g.10gb, memory: 9728, count: 7}]"))
    assert "migGeometries.catalog[0].allowedGeometries[0].group" in str(err.value)


def test_a_group_beyond_the_gpus_compute_slices_is_refused() -> None:
    # c5c2959 accepted 7g + 1g (8 slices) on an A100 and 2g x 3 on an A30 (4 slices)
    with pytest.raises(ConfigError) as err:
        load_config(
            catalog(
                "g1",
                "[{name: 7g.80gb, memory: 80896, count: 1}, "
                "{name: 1g.10gb, memory: 9728, count: 1}]",
            )
        )
    assert "allowedGeometries[0].geometries: the group needs 8 compute slices" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(catalog("g1", "[{name: 2g.12gb, memory: 12288, count: 3}]", '["A30"]'))
    assert "needs 6 compute slices" in str(err.value) and "NVIDIA A30 has 4" in str(err.value)
    ok = load_config(
        catalog(
            "group_2.b",
            "[{name: 2g.20gb, memory: 19968, count: 3}, {name: 1g.10gb, memory: 9728, count: 1}]",
        )
    )
    assert ok.mig_geometries.catalog[0].allowed_geometries[0].group == "group_2.b"


def test_a_bad_catalog_stops_the_controller_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text(catalog("all-1g", "[{name: 1g.10gb, memory: 9728, count: 7}]"))
    proc = subprocess.run(
        [sys.executable, "-m", "vgpu_operator.commands.cli", "run", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "migGeometries.catalog[0].allowedGeometries[0].group" in proc.stderr


# --- 6. plugin <= v1.11 ignores per-node split count and core scaling ------------------------


def test_the_simulated_v1_11_plugin_ignores_the_node_entry() -> None:
    # c5c2959's fake registered the entry's split count (4) and filter for v1.11
    rtx = gpu_node("gpu-a", "RTX-4090", 2, released=HAMI)
    spec = HamiCoreSpec(deviceSplitCount=4, filterDevices={"index": [1]})
    rc = HAMI.model_copy(update={"hami_core": spec})
    node_json = render_node_config(None, {"gpu-a": rc}, OperatorConfig(), NOW).data["config.json"]
    device = text("manifest_device_config.yaml")
    old = simulate_registration(
        rtx, node_json, device, version=Version(1, 11, 0), args=("--device-split-count=10",)
    )
    assert [g.count for g in old.gpus] == [10, 10]  # both GPUs, the flag's split count
    assert old.allocatable == {
        "volcano.sh/vgpu-number": "20",
        "volcano.sh/vgpu-cores": "200",
        "volcano.sh/vgpu-memory": str(2 * 32767),
    }
    new = simulate_registration(rtx, node_json, device, version=Version(1, 12, 0))
    assert [g.count for g in new.gpus] == [4]  # v1.12 reads the entry: split 4, GPU 1 filtered


def test_a_policy_split_count_a_v1_11_plugin_ignores_is_a_warning() -> None:
    # c5c2959: no finding; the policy's deviceSplitCount silently does nothing
    rc = HAMI.model_copy(update={"hami_core": HamiCoreSpec(deviceSplitCount=4)})

    def old_plugin(ds: dict[str, Any]) -> None:
        c = ds["spec"]["template"]["spec"]["containers"][0]
        c["image"] = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.11.0"
        c["args"] = ["--device-split-count=10"]

    snap = edit(healthy(), "daemonsets", "volcano-device-plugin", old_plugin)
    snap = edit(
        snap,
        "nodes",
        "gpu-a",
        lambda n: n["metadata"]["annotations"].update({contract.ANN_CONFIG: rc.to_annotation()}),
    )
    [got] = findings(snap, "plugin-node-overrides")
    assert got.severity == "warning"
    assert got.message == (
        "plugin v1.11.0 ignores the per-node values of policy rtx4090-hami-core on 1 node(s) "
        "(gpu-a): deviceSplitCount 4 (the plugin uses --device-split-count=10); only plugin "
        "v1.12.0 and later read them from config.json"
    )
    same = HAMI.model_copy(update={"hami_core": HamiCoreSpec(deviceSplitCount=10)})
    snap = edit(
        snap,
        "nodes",
        "gpu-a",
        lambda n: n["metadata"]["annotations"].update({contract.ANN_CONFIG: same.to_annotation()}),
    )
    assert findings(snap, "plugin-node-overrides") == []
    assert findings(healthy(), "plugin-node-overrides") == []  # v1.12 reads them


# --- 7. --gpu-memory-factor exists from v1.9.4 ------------------------------------------------


@pytest.mark.parametrize(
    ("version", "has_flag"),
    [("v1.9.0", False), ("v1.9.4", True), ("v1.10.0", True), ("v1.11.0", True)],
)
def test_the_memory_factor_flag_is_owned_from_v1_9_4(version: str, has_flag: bool) -> None:
    # c5c2959 set it from v1.11 only: v1.9.4-v1.10.x kept the flag default 1
    cfg = load_config("gpuMemoryFactor: 11")
    flags = desired_flags(Version.parse(version) or Version(0, 0), cfg)
    assert ("gpu-memory-factor" in flags) is has_flag
    if has_flag:
        assert flags["gpu-memory-factor"] == "11"


def test_a_v1_10_plugin_without_the_factor_flag_is_reported() -> None:
    cfg = load_config("gpuMemoryFactor: 11")
    snap = healthy(cfg)

    def v1_10(ds: dict[str, Any]) -> None:
        c = ds["spec"]["template"]["spec"]["containers"][0]
        c["image"] = "docker.io/projecthami/volcano-vgpu-device-plugin:v1.10.0"
        c["args"] = [
            "--device-split-count=10",
            "--resource-name=volcano.sh/vgpu-number",
            "--resource-memory-name=volcano.sh/vgpu-memory",
            "--resource-core-name=volcano.sh/vgpu-cores",
        ]

    snap = edit(snap, "daemonsets", "volcano-device-plugin", v1_10)
    got = [f.message for f in findings(snap, "plugin-config-flags-override")]
    assert any(m.startswith("--gpu-memory-factor is not given") for m in got), got


# --- 8. geometries from an inventory --------------------------------------------------------


def test_synthesized_geometries_keep_one_profile_per_memory_size() -> None:
    # c5c2959: one group per profile; 2g.20gb (behind 1g.20gb) and 4g.40gb (behind 3g.40gb)
    # were never chosen by the scheduler's first fit
    reported = ReportedGpuModel(
        "NVIDIA H100 X",
        (
            ReportedProfile("1g.10gb", 9984, 7),
            ReportedProfile("1g.20gb", 20091, 4),
            ReportedProfile("2g.20gb", 20091, 3),
            ReportedProfile("3g.40gb", 40448, 2),
            ReportedProfile("4g.40gb", 40448, 1),
            ReportedProfile("7g.80gb", 81152, 1),
            ReportedProfile("1g.10gb+me", 9984, 1),
        ),
    )
    plan = build_known_geometries([], ["NVIDIA H100 X"], [], [reported])
    [entry] = plan.appended
    groups = [[(t.name, t.memory, t.count) for t in g.geometries] for g in entry.allowed_geometries]
    assert groups == [
        [("1g.10gb", 9984, 7)],
        [("2g.20gb", 20091, 3)],
        [("4g.40gb", 40448, 1)],
        [("7g.80gb", 81152, 1)],
    ]
    memories = [g.geometries[0].memory for g in entry.allowed_geometries]
    assert len(set(memories)) == len(memories)  # first fit can reach every group


# --- 9. settings without effect -------------------------------------------------------------


def test_settings_no_component_acts_on_are_notes() -> None:
    # c5c2959: no finding for any of these
    cfg = load_config("deviceDefaults: {deviceMemoryScaling: 2, deviceCoreScaling: 2}")
    snap = healthy(cfg)
    got = findings(snap, "settings-without-effect")
    assert [(f.severity, f.message.split(":")[0]) for f in got] == [
        ("info", "deviceMemoryScaling is 2"),
        ("info", "deviceCoreScaling is 2"),
    ]
    rc = HAMI.model_copy(
        update={"hami_core": HamiCoreSpec(deviceMemoryScaling=1.8, deviceCoreScaling=1.5)}
    )
    snap = edit(
        healthy(),
        "nodes",
        "gpu-a",
        lambda n: n["metadata"]["annotations"].update({contract.ANN_CONFIG: rc.to_annotation()}),
    )
    [by_policy] = findings(snap, "settings-without-effect")
    assert by_policy.objects[0].kind == "VGPUNodePolicy"
    assert "hamiCore.deviceCoreScaling 1.5 (the scheduler caps a GPU at 100 cores)" in (
        by_policy.message
    )
    assert "hamiCore.deviceMemoryScaling 1.8 (no plugin version applies it)" in by_policy.message
    assert findings(healthy(), "settings-without-effect") == []


@pytest.mark.parametrize(
    ("weight", "noted"), [(None, True), ("0", True), ('"10"', True), ("10", False)]
)
def test_a_schedule_policy_without_a_weight_is_a_note(weight: str | None, noted: bool) -> None:
    extra = "\n      deviceshare.SchedulePolicy: binpack"
    if weight is not None:
        extra += f"\n      deviceshare.ScheduleWeight: {weight}"
    conf = text("seed000_scheduler.conf").replace(
        "deviceshare.VGPUEnable: true", "deviceshare.VGPUEnable: true" + extra
    )
    snap = edit(
        healthy(),
        "configmaps",
        "volcano-scheduler-configmap",
        lambda c: c["data"].update({"volcano-scheduler.conf": conf}),
    )
    got = findings(snap, "settings-without-effect")
    assert bool(got) is noted
    if noted:
        assert got[0].message.startswith("deviceshare.SchedulePolicy is 'binpack' but")
