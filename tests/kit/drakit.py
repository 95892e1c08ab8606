"""The kubelet plugin DaemonSet of NVIDIA's DRA driver, as its chart renders it with default values
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/
kubeletplugin.yaml): what the operator's placement reads of it. Built in one place,
`vgpu_devcluster.dra_kubelet`, which the demo installs too."""

from __future__ import annotations

from vgpu_devcluster.dra_kubelet import GPU_LABELS, IMAGE, SELECTOR, kubelet_plugin_daemonset

__all__ = ["GPU_LABELS", "IMAGE", "SELECTOR", "kubelet_plugin_daemonset"]
