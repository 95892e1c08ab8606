"""Rules on what the components do with the live configuration:

- `mig-model-strings`: a knownMigGeometries model string that matches the scheduler's type
  `NVIDIA-<NVML name>` (volcano-sh/volcano@v1.15.1:pkg/scheduler/api/devices/nvidia/vgpu/utils.go
  `extractGeometryFromType`) and not the plugin's NVML name
  (Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:pkg/plugin/server.go `containsModel`);
- `mig-geometry-groups`: a group that cannot exist on the GPU it serves, judged by the catalog or
  by the agent's driver listing for a GPU no catalog row knows (the plugin's `nvidia-mig-parted
  apply` fails and it stops: same server.go `ApplyMigTemplate`);
- `plugin-static-mig`: plugin v1.11 on a static-MIG node, where its filterdevices entry is read
  into a struct nothing uses (Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:
  pkg/plugin/vgpu/util/util.go `readFromConfigFile`, pkg/plugin/vgpu/register.go) and no
  placement patch is sent (report mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import yaml

from tests.kit.volcano_fixtures import (
    edit,
    findings,
    gpu_node,
    healthy,
    healthy_daemonset,
    replace,
)
from vgpu_operator import contract
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig, RestartPolicy
from vgpu_operator.models.inventory import GpuInfo, Inventory, ProfileInfo
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import MigLayout, MigSpec
from vgpu_operator.models.volcano import REGISTER_ANNOTATION

DEVICE_CM = "volcano-vgpu-device-config"
Mode = Literal["enforce", "report", "observe"]


def edit_geometries(
    s: ClusterSnapshot, change: Callable[[list[dict[str, Any]]], None]
) -> ClusterSnapshot:
    def apply(cm: dict[str, Any]) -> None:
        data = yaml.safe_load(cm["data"]["device-config.yaml"])
        change(data["nvidia"]["knownMigGeometries"])
        cm["data"]["device-config.yaml"] = yaml.safe_dump(data, sort_keys=False)

    return edit(s, "configmaps", DEVICE_CM, apply)


def a100_entry(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in entries if "A100-SXM4-40GB" in e["models"])


# --- mig-model-strings -----------------------------------------------------------------------


def test_the_consistent_cluster_has_no_finding_of_these_rules() -> None:
    s = healthy()
    for rule in ("mig-model-strings", "mig-geometry-groups", "plugin-static-mig"):
        assert findings(s, rule) == []


def test_a_model_string_with_the_registered_prefix_is_an_error() -> None:
    def gfd_label(entries: list[dict[str, Any]]) -> None:
        a100_entry(entries)["models"].append("NVIDIA-A100-SXM4-40GB")

    [f] = findings(edit_geometries(healthy(), gfd_label), "mig-model-strings")
    assert f.severity == "error" and not f.fixable_by_operator
    assert f.message.startswith(
        "knownMigGeometries[1].models[4] 'NVIDIA-A100-SXM4-40GB' matches in the scheduler and "
        "not in the device plugin: it contains 'NVIDIA-'"
    )
    assert "(GenerateMigTemplate: position -1)" in f.message
    assert f.fix.startswith(f"edit the string in kube-system/{DEVICE_CM} to a part of the NVML")


# --- mig-geometry-groups ---------------------------------------------------------------------


def test_a_group_the_a100_cannot_hold_is_an_error_where_a_node_has_it() -> None:
    def nine_slices(entries: list[dict[str, Any]]) -> None:
        a100_entry(entries)["allowedGeometries"][2]["geometries"] = [
            {"name": "3g.20gb", "memory": 19968, "count": 2},
            {"name": "1g.5gb", "memory": 4864, "count": 1},
        ]

    f, pcie = findings(edit_geometries(healthy(), nine_slices), "mig-geometry-groups")
    # the entry serves the PCIe card too ("A100-PCIE-40GB"), which no node has: said, no error
    assert pcie.severity == "info" and "cannot exist on NVIDIA A100-PCIE-40GB" in pcie.message
    assert f.severity == "error"  # gpu-b has an A100-SXM4-40GB
    assert f.message == (
        "knownMigGeometries[1] group 'group3' cannot exist on NVIDIA A100-SXM4-40GB (the "
        "catalog's geometry): 3g.20gb x2 + 1g.5gb needs 9 of the 8 memory slices of NVIDIA "
        "A100-SXM4-40GB (memory slices each: 3g.20gb 4, 1g.5gb 1); the device plugin's "
        "nvidia-mig-parted apply fails when a pod gets an instance of it, and the plugin stops "
        "(the pod fails with UnexpectedAdmissionError)"
    )


def b200_inventory() -> Inventory:
    """A GPU no catalog row knows, with the profiles and placements an agent read from the
    driver: 8 memory slices, 7 compute slices (a made-up listing, shaped as -lgip/-lgipp print)."""
    profiles = [
        ProfileInfo(
            id=19,
            name="1g.23gb",
            slices=1,
            memory_mib=23552,
            count=7,
            size=1,
            placements=list(range(7)),
        ),
        ProfileInfo(
            id=14, name="2g.45gb", slices=2, memory_mib=46080, count=3, size=2, placements=[0, 2, 4]
        ),
        ProfileInfo(
            id=9, name="3g.90gb", slices=3, memory_mib=92160, count=2, size=4, placements=[0, 4]
        ),
        ProfileInfo(
            id=0, name="7g.180gb", slices=7, memory_mib=184320, count=1, size=8, placements=[0]
        ),
    ]
    gpu = GpuInfo(
        index=0,
        uuid="GPU-b200-0",
        name="NVIDIA B200",
        bus_id="00000000:01:00.0",
        memory_mib=184320,
        mig_capable=True,
        mig_current=True,
        mig_pending=True,
        profiles=profiles,
        profiles_source="driver",
    )
    return Inventory(gpus=[gpu])


def with_b200(group: list[dict[str, Any]]) -> ClusterSnapshot:
    s = healthy()
    node = gpu_node("b200-0", "RTX-4090", 1)  # the inventory says what the GPU is
    node["metadata"]["annotations"][contract.ANN_INVENTORY] = b200_inventory().to_annotation()

    def add(entries: list[dict[str, Any]]) -> None:
        entries.append(
            {"models": ["B200"], "allowedGeometries": [{"group": "g1", "geometries": group}]}
        )

    return edit_geometries(replace(s, nodes=[*s.nodes, node]), add)


def test_a_group_the_agents_listing_refutes_is_an_error_for_a_model_no_catalog_knows() -> None:
    s = with_b200(
        [
            {"name": "3g.90gb", "memory": 92160, "count": 2},
            {"name": "1g.23gb", "memory": 23552, "count": 1},
        ]
    )
    [f] = findings(s, "mig-geometry-groups")
    assert f.severity == "error"
    assert [o.name for o in f.objects] == [DEVICE_CM, "b200-0"]
    assert f.message.startswith(
        "knownMigGeometries[3] group 'g1' cannot exist on NVIDIA B200, which no catalog row "
        "knows, by the profiles the agent of b200-0 read from the driver "
        "(vgpu.volcano.sh/inventory): 3g.90gb x2 + 1g.23gb needs 9 of the 8 memory slices of "
        "NVIDIA B200"
    )


def test_a_group_the_agents_listing_allows_is_quiet() -> None:
    fits = [  # 3g at 0, 2g at 4, 1g at 6: 7 of the 8 memory slices
        {"name": "3g.90gb", "memory": 92160, "count": 1},
        {"name": "2g.45gb", "memory": 46080, "count": 1},
        {"name": "1g.23gb", "memory": 23552, "count": 1},
    ]
    assert findings(with_b200(fits), "mig-geometry-groups") == []
    missing = [{"name": "4g.90gb", "memory": 92160, "count": 1}]
    [f] = findings(with_b200(missing), "mig-geometry-groups")
    assert "its listing has no profile 4g.90gb" in f.message


def test_a_gpu_neither_the_catalog_nor_an_agent_describes_is_said_to_be_unchecked() -> None:
    """Registered as a model the catalog has no row for (the entry serves it by substring):
    only the compute slices of its groups could be checked (models.config_mig)."""

    def rename(node: dict[str, Any]) -> None:
        annotations = node["metadata"]["annotations"]
        annotations[REGISTER_ANNOTATION] = annotations[REGISTER_ANNOTATION].replace(
            "A100-SXM4-40GB", "A100-SXM4-40GB-X"
        )

    [f] = findings(edit(healthy(), "nodes", "gpu-b", rename), "mig-geometry-groups")
    assert f.severity == "info"
    assert f.message.startswith(
        "the knownMigGeometries groups serving NVIDIA A100-SXM4-40GB-X are checked by their "
        "compute slices only"
    )


# --- plugin-static-mig -----------------------------------------------------------------------

STATIC = NodeConfig(
    mode="mig",
    policy="h100-static-mig",
    generation=1,
    mig=MigSpec(partitioning="static", layout=[MigLayout(profiles={"1g.10gb": 7})]),
)


def stray_plugin(
    version: str, mode: Mode = "report", *, placed: bool = False, restarts: bool = True
) -> ClusterSnapshot:
    """The healthy cluster, a static-MIG H100 node (untainted, as static pools are) and the
    plugin DaemonSet as shipped (no nodeSelector) unless `placed` (the operator's placement)."""
    config = OperatorConfig(mode=mode, restarts=RestartPolicy(allowed=restarts))
    s = healthy(config)
    ds = healthy_daemonset()
    spec = ds["spec"]["template"]["spec"]
    if not placed:
        spec.pop("nodeSelector")
    spec["containers"][0]["image"] = f"docker.io/projecthami/volcano-vgpu-device-plugin:{version}"
    h100 = gpu_node("h100-0", "H100-80GB-HBM3", 8, released=STATIC, tainted=False)
    return replace(s, nodes=[*s.nodes, h100], daemonsets=[ds])


def test_plugin_v1_11_on_a_static_mig_node_in_report_mode_is_an_error() -> None:
    [f] = findings(stray_plugin("v1.11.0"), "plugin-static-mig")
    assert f.severity == "error"
    assert [o.name for o in f.objects] == ["volcano-device-plugin", "h100-0"]
    assert f.message == (
        "plugin v1.11.0 reaches 1 static-MIG node(s) (h100-0): up to v1.11 it registers every "
        "GPU whatever the node's filterdevices entry says, so it registers their MIG-enabled "
        "GPUs in hami-core mode and Volcano places vGPU pods on them; the operator does not keep "
        "it off, as the operator config's mode is report"
    )
    assert f.fix.startswith("upgrade the device plugin to v1.12.0 or later")


def test_plugin_static_mig_speaks_only_where_the_operator_does_not_place_the_plugin() -> None:
    assert findings(stray_plugin("v1.12.0"), "plugin-static-mig") == []  # it reads the filter
    assert findings(stray_plugin("v1.11.0", placed=True), "plugin-static-mig") == []
    assert findings(stray_plugin("v1.11.0", "enforce"), "plugin-static-mig") == []
    [f] = findings(stray_plugin("v1.11.0", "enforce", restarts=False), "plugin-static-mig")
    assert "restarts.allowed is false" in f.message
    # enforce mode sends the placement patch: plugin-placement says so
    placement = findings(stray_plugin("v1.11.0", "enforce"), "plugin-placement")
    assert any("h100-0 (static MIG" in p.message for p in placement)


def test_a_static_mig_node_the_plugin_registered_is_named_even_when_placed() -> None:
    s = stray_plugin("v1.11.0", placed=True)
    registered = "GPU-h100-0,10,81559,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:"

    def mark(node: dict[str, Any]) -> None:
        node["metadata"]["annotations"][REGISTER_ANNOTATION] = registered

    [f] = findings(edit(s, "nodes", "h100-0", mark), "plugin-static-mig")
    assert ", and its volcano.sh/node-vgpu-register is on h100-0:" in f.message


def test_run_rules_reports_the_rules_in_one_pass() -> None:
    ids = {f.id for f in run_rules(stray_plugin("v1.11.0")).findings}
    assert "plugin-static-mig" in ids
