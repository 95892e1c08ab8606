"""The operator config's `dra:` section: the one installation of NVIDIA's DRA driver that the
cluster's `dra` pools use, as the operator must know it to place the driver's kubelet plugin and
to judge what the pools may ask of it.

- `driver`: the driver's name, in its ResourceSlices and allocations
  (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/main.go `DriverName`);
- `kubeletPluginDaemonSet`: its kubelet plugin DaemonSet, which the operator gives a nodeSelector
  on `vgpu.volcano.sh/device-plugin=dra` as it places HAMi's plugin (the chart's
  `kubeletPlugin.nodeSelector` is empty and its affinity admits every NVIDIA GPU node:
  kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/values.yaml);
  the defaults are the chart's name in the namespace of its install guide
  (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:docs/install.md);
- `dynamicMIG`: whether that installation runs with its `DynamicMIG` feature gate on (alpha, off by
  default: kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:pkg/featuregates/featuregates.go). The
  operator cannot read a kubelet plugin's gates, so it takes this as said; `dynamic-mig` pools are
  refused while it is false, and `static-mig` pools while it is true (with the gate on the plugin
  destroys at start every MIG device it did not create).

Unset (`dra: null`, the default), no policy may use mode `dra`: the operator would not know which
DaemonSet to place.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from vgpu_operator.models.config_refs import (
    DNS_SUBDOMAIN,
    ConfigModel,
    Namespace,
    ObjectName,
    fix_hint,
)

# kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/main.go `DriverName`
DEFAULT_DRIVER: Final = "gpu.nvidia.com"
# The chart's kubelet plugin DaemonSet `<chart name>-kubelet-plugin`
# (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/
# kubeletplugin.yaml) in the namespace of kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
# docs/install.md.
DEFAULT_PLUGIN_NAMESPACE: Final = "dra-driver-nvidia-gpu"
DEFAULT_PLUGIN_DAEMONSET: Final = "dra-driver-nvidia-gpu-kubelet-plugin"


class DaemonSetRef(ConfigModel):
    """A DaemonSet by namespace and name (no discovery: written as it is)."""

    namespace: Namespace
    name: ObjectName


class DraInstallation(ConfigModel):
    driver: Annotated[
        str,
        Field(
            pattern=DNS_SUBDOMAIN,
            max_length=63,
            json_schema_extra=fix_hint("use the DRA driver's name, e.g. gpu.nvidia.com"),
        ),
    ] = DEFAULT_DRIVER
    kubelet_plugin_daemon_set: DaemonSetRef = Field(
        default=DaemonSetRef(namespace=DEFAULT_PLUGIN_NAMESPACE, name=DEFAULT_PLUGIN_DAEMONSET),
        alias="kubeletPluginDaemonSet",
    )
    dynamic_mig: bool = Field(
        default=False,
        alias="dynamicMIG",
        json_schema_extra=fix_hint(
            "true only when the driver runs with its DynamicMIG feature gate on "
            "(featureGates.DynamicMIG=true in its chart)"
        ),
    )
