"""`vgpu-operator doctor` names each missing prerequisite of the DRA pools that the API shows
(issue 33), on the real apiserver, one test each, over one cluster broken in every way at once
(each break on objects of its own, so one doctor run shows them all):

- a DeviceClass of the driver's chart missing (mig.nvidia.com deleted);
- the driver's kubelet plugin not on a DRA node (its placement label missing there), and on a
  node that is not a DRA node (the label without the dra configuration);
- a DRA node with no ResourceSlice (the plugin runs there and publishes nothing);
- a second owner of a DRA node's GPUs: NVIDIA's device plugin (`nvidia.com/gpu` allocatable) and
  HAMi's plugin (its register annotation and its resources, as its registration writes them:
  vgpu_devcluster.fakeplugin, Project-HAMi/volcano-vgpu-device-plugin@v1.12.0); what a HAMi
  plugin that has gone leaves behind (the annotation, its resources allocatable 0) is not one;
- the feature gates a dynamic-mig DRA node needs that the API cannot show, listed as not
  observable in doctor's table, DynamicResourceAllocation proven on.

Not testable here: `dra-api-not-served` (the apiserver not serving resource.k8s.io/v1). Kubernetes
1.35 serves it always (DRA is GA and locked on), and the local control plane runs v1.35.4; the
rule is unit-tested (tests/unit/core/rules/test_rules_dra.py,
tests/unit/core/dra/test_prerequisites.py).

The nodes carry the released configuration the operator writes (no operator runs); the kubelet
plugin DaemonSet is the chart's (vgpu_devcluster.dra_kubelet) with the placement the operator
gives it, and its pods publish through the driver's double
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.helpers import eventually, unique
from tests.kit.volcano_fixtures import MANIFEST, text
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.dra_kubelet import KubeletPluginSimulator, install_kubelet_plugin
from vgpu_devcluster.dra_publish import CLASSES, install_device_classes, remove_device_classes
from vgpu_devcluster.fakeplugin import simulate_registration
from vgpu_devcluster.install import ensure_namespace
from vgpu_devcluster.nodes import NodeSpec, create_gpu_nodes, gpu_node_manifest
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import workload_path
from vgpu_operator.models.config_dra import DEFAULT_PLUGIN_DAEMONSET as DRA_DS
from vgpu_operator.models.config_dra import DEFAULT_PLUGIN_NAMESPACE as DRA_NS
from vgpu_operator.models.node import NodeConfig

pytestmark = pytest.mark.cluster

RULES = (
    "dra-api-not-served",
    "dra-deviceclass",
    "dra-node-slices",
    "dra-plugin-placement",
    "dra-second-owner",
    "dra-feature-gates",
)
WHOLE = NodeConfig.model_validate({"mode": "dra", "policy": "dra-pool", "generation": 1})
DYNAMIC = NodeConfig.model_validate(
    {"mode": "dra", "policy": "dra-pool", "generation": 1, "mig": {"partitioning": "dynamic"}}
)
PLACED = {contract.LABEL_DEVICE_PLUGIN: "dra"}  # the operator's placement label for the plugin


@dataclass(frozen=True)
class Broken:
    """One doctor run over the broken cluster: its exit code, its JSON findings, its table."""

    nodes: dict[str, str]  # role -> node name
    code: int
    findings: list[dict[str, Any]]
    table: str

    def about(self, rule: str, role: str) -> list[dict[str, Any]]:
        name = self.nodes[role]
        return [
            f
            for f in self.findings
            if f["id"] == rule and any(o.get("name") == name for o in f.get("objects") or [])
        ]


def spec(name: str, config: NodeConfig | None, *, placed: bool, nvidia: bool = False) -> NodeSpec:
    annotations = {contract.ANN_CONFIG: config.to_annotation()} if config else {}
    return NodeSpec(
        name,
        "A30",
        2,
        labels=PLACED if placed else {},
        annotations=annotations,
        nvidia_device_plugin=nvidia,
    )


async def register_hami(api: client.ApiClient, spec: NodeSpec, *, gone: bool) -> None:
    """What HAMi's plugin pod writes when it starts on the node: its register annotation, and
    through kubelet its resources, computed from the plugin manifest's device config as the
    plugin reads it (vgpu_devcluster.fakeplugin, Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:
    pkg/util/util.go `LoadNvidiaConfig`, pkg/rm/rm.go `AddGPUResource`: `resourceCountName`,
    `resourceCoreName`, `resourceMemoryName`). `gone`: the plugin pod has left since, so kubelet
    shows its resources allocatable 0 and the annotation stays (as vgpu_devcluster.pluginsim
    withdraws them)."""
    reg = simulate_registration(gpu_node_manifest(spec), None, text(MANIFEST))
    assert reg.problem is None and reg.allocatable, reg
    path = kubeapi.node_path(spec.name)
    await kubeapi.request(
        api,
        "PATCH",
        path,
        body=reg.metadata_patch(),
        content_type=kubeapi.MERGE_PATCH,
        field_manager="volcano-device-plugin-sim",
    )
    status = reg.status_patch()
    if gone:
        status["status"]["allocatable"] = dict.fromkeys(reg.allocatable, "0")
    await kubeapi.request(
        api,
        "PATCH",
        f"{path}/status",
        body=status,
        content_type=kubeapi.MERGE_PATCH,
        field_manager="volcano-device-plugin-sim",
    )


async def doctor(config: Path, kubeconfig: Path, output: str) -> tuple[int, str]:
    rules = [arg for rule in RULES for arg in ("--rule", rule)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vgpu_operator.commands.cli",
        "doctor",
        "--kubeconfig",
        str(kubeconfig),
        "--config",
        str(config),
        *rules,
        "-o",
        output,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert "Traceback" not in err.decode(), err.decode()
    return int(proc.returncode or 0), out.decode()


@pytest.fixture(scope="module")
async def broken(
    api: client.ApiClient, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Broken]:
    tmp = tmp_path_factory.mktemp("dra-doctor")
    group = unique("dd")
    roles = {
        "ok": spec(f"{group}-ok", WHOLE, placed=True),
        "no-plugin": spec(f"{group}-no-plugin", WHOLE, placed=False),
        "no-slice": spec(f"{group}-no-slice", WHOLE, placed=True),
        "not-dra": spec(f"{group}-not-dra", None, placed=True, nvidia=True),
        "nvidia": spec(f"{group}-nvidia", WHOLE, placed=True, nvidia=True),
        "hami": spec(f"{group}-hami", WHOLE, placed=True),
        "hami-gone": spec(f"{group}-hami-gone", WHOLE, placed=True),
        "dynamic": spec(f"{group}-dynamic", DYNAMIC, placed=True),
    }
    names = {role: s.name for role, s in roles.items()}
    # what NVML shows on each node; the plugin on `no-slice` finds nothing it can publish
    states = {
        s.name: fs.init_state(tmp / f"{s.name}.json", "A30", 2, node=s.name)
        for role, s in roles.items()
        if role != "no-slice"
    }
    sim = KubeletPluginSimulator(api, states.get)
    await ensure_namespace(api, DRA_NS)
    ds_path = workload_path("DaemonSet", DRA_NS, DRA_DS)
    try:
        await create_gpu_nodes(api, roles.values())
        await register_hami(api, roles["hami"], gone=False)
        await register_hami(api, roles["hami-gone"], gone=True)
        await install_device_classes(api)
        await kubeapi.request(api, "DELETE", f"{CLASSES}/mig.nvidia.com", field_manager=None)
        ds = await install_kubelet_plugin(api)
        # placed as the operator places it: a nodeSelector on its label
        await kubeapi.request(
            api,
            "PATCH",
            ds_path,
            body={"spec": {"template": {"spec": {"nodeSelector": PLACED}}}},
            content_type=kubeapi.MERGE_PATCH,
            field_manager="vgpu-operator",
        )
        assert ds["metadata"]["name"] == DRA_DS
        sim.start()
        labelled = {s.name for s in roles.values() if s.labels}

        async def settled() -> bool:
            return set(await sim.running_pods()) == labelled and set(sim.published) == (
                labelled - {names["no-slice"]}
            )

        await eventually(settled, timeout=30, interval=0.3)
        config = tmp / "config.yaml"
        config.write_text("dra: {}\n")
        code, out = await doctor(config, kubeconfig, "json")
        _, table = await doctor(config, kubeconfig, "table")
        yield Broken(names, code, json.loads(out)["findings"], table)
    finally:
        await sim.stop()
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(api, "DELETE", ds_path, field_manager=None)
        await remove_device_classes(api)
        for name in names.values():
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(api, "DELETE", kubeapi.node_path(name), field_manager=None)


def test_a_healthy_dra_node_is_named_by_no_finding(broken: Broken) -> None:
    assert broken.code == 1  # the rest is broken
    for rule in RULES[:-1]:
        assert broken.about(rule, "ok") == [], rule
    assert not [f for f in broken.findings if f["id"] == "dra-api-not-served"]


def test_a_missing_device_class_is_named(broken: Broken) -> None:
    [found] = [f for f in broken.findings if f["id"] == "dra-deviceclass"]
    assert found["severity"] == "error"
    assert [(o["kind"], o["name"]) for o in found["objects"]] == [("DeviceClass", "mig.nvidia.com")]
    assert found["message"].startswith("DeviceClass mig.nvidia.com is missing")
    assert "helm install dra-driver-nvidia-gpu" in found["fix"]


def test_the_plugin_missing_on_a_dra_node_is_named(broken: Broken) -> None:
    [found] = broken.about("dra-plugin-placement", "no-plugin")
    assert found["severity"] == "error"
    assert "the DaemonSet has no pod there" in found["message"]
    assert "kubeletPlugin.nodeSelector" in found["fix"]


def test_the_plugin_on_a_node_outside_dra_is_named(broken: Broken) -> None:
    [found] = broken.about("dra-plugin-placement", "not-dra")
    assert found["severity"] == "warning"
    assert f"runs on {broken.nodes['not-dra']}, which is not a DRA node" in found["message"]


def test_a_dra_node_without_a_slice_is_named(broken: Broken) -> None:
    [found] = broken.about("dra-node-slices", "no-slice")
    assert found["severity"] == "error"
    assert found["message"].startswith(
        f"DRA node {broken.nodes['no-slice']} has no ResourceSlice of driver gpu.nvidia.com"
    )
    # the plugin runs there: only the slice is missing
    assert broken.about("dra-plugin-placement", "no-slice") == []
    # and the node without its plugin has none either
    assert len(broken.about("dra-node-slices", "no-plugin")) == 1


def test_nvidia_device_plugin_on_a_dra_node_is_a_second_owner(broken: Broken) -> None:
    [found] = broken.about("dra-second-owner", "nvidia")
    assert found["severity"] == "error"
    assert "NVIDIA's device plugin registers nvidia.com/gpu: 2" in found["message"]
    assert "publishes them (2 devices)" in found["message"]
    assert "nvidia.com/gpu.deploy.device-plugin=false" in found["fix"]


def test_hami_registration_on_a_dra_node_is_a_second_owner(broken: Broken) -> None:
    [found] = broken.about("dra-second-owner", "hami")
    assert found["severity"] == "error"
    assert "HAMi's device plugin has registered them" in found["message"]
    assert "volcano.sh/vgpu-number: 20" in found["message"]  # 2 GPUs split 10 ways


def test_what_a_gone_hami_plugin_left_behind_is_no_second_owner(broken: Broken) -> None:
    """Its register annotation stays, its resources are allocatable 0: nothing registers the
    GPUs, and the node is as healthy as `ok`."""
    for rule in RULES[:-1]:
        assert broken.about(rule, "hami-gone") == [], rule


def test_the_feature_gates_it_cannot_observe_are_listed(broken: Broken) -> None:
    gates = {f["objects"][0]["name"]: f for f in broken.findings if f["id"] == "dra-feature-gates"}
    assert gates["kube-apiserver/DynamicResourceAllocation"]["message"].endswith(
        ": on (the apiserver serves resource.k8s.io/v1)"
    )
    unobserved = {
        "kube-apiserver/DRAPartitionableDevices",
        "vc-scheduler/DRAPartitionableDevices",
        "gpu.nvidia.com kubelet plugin/DynamicMIG",
    }
    assert set(gates) == {"kube-apiserver/DynamicResourceAllocation", *unobserved}
    for name in unobserved:
        assert gates[name]["severity"] == "info"
        assert ": not observable (" in gates[name]["message"], gates[name]
    # in the table a person reads (its paragraphs wrapped)
    flat = " ".join(broken.table.split())
    for name in unobserved:
        assert f"[info] dra-feature-gates: FeatureGate {name}" in flat, broken.table
        assert " ".join(gates[name]["message"].split()) in flat
