"""What NVIDIA's DRA driver for GPUs is called in a cluster, as its release names it
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1): the driver, the API it publishes through, the
DeviceClasses its chart installs and the kubelet plugin's DaemonSet. The driver's name and the
DaemonSet are the operator config's (`dra.driver`, `dra.kubeletPluginDaemonSet`): the names here
are their defaults, and every check takes the configured ones."""

from __future__ import annotations

from typing import Final

from vgpu_operator.models.config_dra import (
    DEFAULT_DRIVER,
    DEFAULT_PLUGIN_DAEMONSET,
    DEFAULT_PLUGIN_NAMESPACE,
)

# kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/main.go `DriverName` (the
# default of the operator config's `dra.driver`)
DRIVER: Final = DEFAULT_DRIVER

# The GA API of DRA (Kubernetes 1.34+). The chart writes its DeviceClasses in the highest version
# served and the kubelet plugin builds k8s.io/api/resource/v1 ResourceSlices
# (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/
# _helpers.tpl `dra-driver-nvidia-gpu.resourceApiVersion`).
RESOURCE_API: Final = "resource.k8s.io/v1"
RESOURCE_GROUP: Final = "resource.k8s.io"


def selector(device_type: str, driver: str = DRIVER) -> str:
    """The CEL selector of the chart's DeviceClass for one device type of `driver`."""
    return f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{device_type}'"


# DeviceClass name -> the device type it selects, as the driver's chart names and writes them
# (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/
# deviceclass-gpu.yaml, deviceclass-mig.yaml and deviceclass-vfio-gpu.yaml beside it; the device
# types of kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/types.go). The
# names are the chart's own, whatever the driver is called; what they select is the driver's
# devices (`device_classes(driver)`).
CLASS_TYPES: Final = {
    "gpu.nvidia.com": "gpu",
    "mig.nvidia.com": "mig",
    "vfio.gpu.nvidia.com": "vfio",
}


def device_classes(driver: str = DRIVER) -> dict[str, str]:
    """DeviceClass name -> its CEL selector, for the driver named `driver`."""
    return {name: selector(kind, driver) for name, kind in CLASS_TYPES.items()}


DEVICE_CLASSES: Final = device_classes()
# Whole GPUs and MIG devices are what a pool hands out; the vfio class only serves passthrough
# (the PassthroughSupport feature gate, off by default:
# kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:pkg/featuregates/featuregates.go).
REQUIRED_CLASSES: Final = ("gpu.nvidia.com", "mig.nvidia.com")
# The chart's kubelet plugin DaemonSet `<chart name>-kubelet-plugin` and its pods' selector label
# `<chart name>-component: kubelet-plugin`, in the namespace its install guide uses
# (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/
# kubeletplugin.yaml and `selectorLabels` in _helpers.tpl beside it;
# kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:docs/install.md).
PLUGIN_DAEMONSET: Final = DEFAULT_PLUGIN_DAEMONSET
PLUGIN_POD_LABEL: Final = ("dra-driver-nvidia-gpu-component", "kubelet-plugin")
PLUGIN_NAMESPACE: Final = DEFAULT_PLUGIN_NAMESPACE
