"""The second owners' DaemonSets as their projects ship them (tests/data/second_owners/, each
file's header says where it comes from and how it was rendered): HAMi's own device plugin, the
kubelet plugin of NVIDIA's DRA driver and the GPU Operator's mig-manager. Shared by the unit and
the cluster tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parents[1] / "data" / "second_owners"

HAMI_NAMESPACE = "kube-system"
DRA_NAMESPACE = "dra-driver-nvidia-gpu"
GPU_OPERATOR_NAMESPACE = "gpu-operator"
# HAMi's chart places its device plugin on nodes labelled so (values.yaml
# `devicePlugin.nvidiaNodeSelector`, Project-HAMi/HAMi@v2.10.0:charts/hami/values.yaml).
HAMI_NODE_LABEL = {"gpu": "on"}
# What HAMi's device plugin writes on its Node when it registers the GPUs (the JSON of
# `device.MarshalNodeDevices`, Project-HAMi/HAMi@v2.10.0:pkg/device-plugin/nvidiadevice/
# nvinternal/plugin/register.go); the rules and the agent read its presence, not its content.
HAMI_REGISTERED = (
    '[{"id":"GPU-8f2a","count":10,"devmem":81559,"devcore":100,'
    '"type":"NVIDIA-NVIDIA H100 80GB HBM3","health":true,"mode":"mig"}]'
)


def _load(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((DATA / name).read_text()) if d]
    assert len(docs) == 1 and docs[0]["kind"] == "DaemonSet", name
    return dict(docs[0])


def hami_device_plugin() -> dict[str, Any]:
    """`hami-device-plugin` in kube-system (helm release `hami`)."""
    return _load("hami-v2.10.0-device-plugin.yaml")


def dra_kubelet_plugin(*, dynamic_mig: bool = True) -> dict[str, Any]:
    """`dra-driver-nvidia-gpu-kubelet-plugin`; without `dynamic_mig`, as the chart renders it
    with no feature gate set (no FEATURE_GATES entry in any container)."""
    ds = _load("dra-driver-nvidia-gpu-v0.4.1-kubelet-plugin.yaml")
    if not dynamic_mig:
        for c in ds["spec"]["template"]["spec"]["containers"]:
            c["env"] = [e for e in c.get("env") or [] if e.get("name") != "FEATURE_GATES"]
    return ds


def mig_manager(namespace: str = GPU_OPERATOR_NAMESPACE) -> dict[str, Any]:
    """`nvidia-mig-manager` with what the GPU Operator fills in: its namespace, the images of
    v26.7.0's defaults (deployments/gpu-operator/values.yaml `migManager`, `validator`) and the
    default ConfigMaps (`MigDefaultGPUClientsConfigMapName`, `MigPartedDefaultConfigMapName`,
    NVIDIA/gpu-operator@v26.7.0:controllers/object_controls.go `TransformMIGManager`)."""
    ds = _load("gpu-operator-v26.7.0-mig-manager.yaml")
    ds["metadata"]["namespace"] = namespace
    spec = ds["spec"]["template"]["spec"]
    for c in spec["initContainers"]:
        c["image"] = "nvcr.io/nvidia/gpu-operator:v26.7.0"
    for c in spec["containers"]:
        c["image"] = "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0"
    filled = {
        "gpu-clients": "default-gpu-clients",
        "mig-parted-config": "default-mig-parted-config",
    }
    for volume in spec["volumes"]:
        if volume["name"] in filled:
            volume["configMap"]["name"] = filled[volume["name"]]
    return ds
