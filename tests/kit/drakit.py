"""NVIDIA's DRA driver as the unit tests see it: the kubelet plugin DaemonSet as its chart renders
it with default values (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/
dra-driver-nvidia-gpu/templates/kubeletplugin.yaml): what the operator's placement reads of it,
built in one place, `vgpu_devcluster.dra_kubelet`, which the demo installs too; and the chart's
DeviceClasses as an apiserver of a given minor version stores them."""

from __future__ import annotations

from typing import Any

from vgpu_devcluster.dra_driver import device_classes
from vgpu_devcluster.dra_kubelet import GPU_LABELS, IMAGE, SELECTOR, kubelet_plugin_daemonset

__all__ = [
    "GPU_LABELS",
    "IMAGE",
    "SELECTOR",
    "kubelet_plugin_daemonset",
    "stored_device_classes",
]


def stored_device_classes(minor: int = 35) -> list[dict[str, Any]]:
    """The chart's DeviceClasses (the double's copy) as kube-apiserver 1.`minor` stores them:
    before 1.36 its DRAExtendedResource gate is off (alpha) and it drops `extendedResourceName`,
    from 1.36 (beta, on) it keeps it (kubernetes/api@v0.35.4 and @v0.36.0:resource/v1/types.go
    `DeviceClassSpec.ExtendedResourceName`)."""
    out = []
    for dc in device_classes():
        spec = dict(dc["spec"])
        if minor < 36:
            spec.pop("extendedResourceName", None)
        out.append({**dc, "spec": spec})
    return out


def claim_pod(name: str, template: str, grace: int = 1) -> dict[str, Any]:
    """A pod holding one claim made from the ResourceClaimTemplate `template`: kube-scheduler
    places it (no nodeName, no toleration)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }
