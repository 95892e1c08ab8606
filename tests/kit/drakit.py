"""The kubelet plugin DaemonSet of NVIDIA's DRA driver, as its chart renders it with default
values (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/
templates/kubeletplugin.yaml with values.yaml beside it): what the operator's placement reads of
it. Its containers are reduced to one (name and image: the placement never reads the rest); its
placement is the chart's own: no nodeSelector (`kubeletPlugin.nodeSelector: {}`), a required node
affinity on any label showing an NVIDIA GPU (`kubeletPlugin.affinity`), and the toleration of
`nvidia.com/gpu:NoSchedule` (`kubeletPlugin.tolerations`); its pods' selector label is
`<chart name>-component: kubelet-plugin` (`dra-driver-nvidia-gpu.selectorLabels` in
templates/_helpers.tpl)."""

from __future__ import annotations

from typing import Any

from vgpu_operator.models.config_dra import DEFAULT_PLUGIN_DAEMONSET, DEFAULT_PLUGIN_NAMESPACE

SELECTOR = {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}
IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
# values.yaml `kubeletPlugin.affinity`: one term per label that shows an NVIDIA GPU
GPU_LABELS = (
    ("feature.node.kubernetes.io/pci-10de.present", "true"),
    ("feature.node.kubernetes.io/pci-0302_10de.present", "true"),
    ("feature.node.kubernetes.io/pci-0300_10de.present", "true"),
    ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"),
    ("nvidia.com/gpu.present", "true"),
)


def kubelet_plugin_daemonset(
    namespace: str = DEFAULT_PLUGIN_NAMESPACE, name: str = DEFAULT_PLUGIN_DAEMONSET
) -> dict[str, Any]:
    terms = [
        {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        for key, value in GPU_LABELS
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": "3",
            "uid": "uid-dra-kubelet-plugin",
        },
        "spec": {
            "selector": {"matchLabels": dict(SELECTOR)},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "100%"},
            },
            "template": {
                "metadata": {
                    "labels": {
                        "app.kubernetes.io/name": "dra-driver-nvidia-gpu",
                        "app.kubernetes.io/instance": "dra-driver-nvidia-gpu",
                        **SELECTOR,
                    }
                },
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "containers": [{"name": "gpus", "image": IMAGE}],
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": terms
                            }
                        }
                    },
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            },
        },
    }
