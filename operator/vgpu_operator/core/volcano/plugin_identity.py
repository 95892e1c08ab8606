"""Whether the DaemonSet the operator config names as `devicePlugin` is HAMi's vGPU plugin.

The operator renders that plugin's flags (versions ≤ v1.11) and its placement. Another plugin
under that name (volcano-sh/devices' legacy GPU-sharing plugin, which upstream also calls
`volcano-device-plugin`; NVIDIA's k8s-device-plugin) reads neither: patched, its pods would
restart with flags it may not know and leave the nodes it serves. HAMi's plugin is recognised by
a container image named `volcano-vgpu-device-plugin` (`projecthami/volcano-vgpu-device-plugin`
in Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:volcano-vgpu-device-plugin.yml, under any
registry or mirror path), as discovery finds it (`core.volcano.workloads.is_vgpu_plugin`). The
operator config has no switch to override this: point `devicePlugin` at HAMi's DaemonSet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_operator.core.volcano.render.plugin_args import PLUGIN_IMAGE_HINT
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.volcano_views import WorkloadView, workload_view

__all__ = [
    "FOREIGN_PLUGIN_FIX",
    "foreign_images",
    "foreign_vgpu_plugin",
    "is_hami_plugin",
    "is_hami_workload",
]

FOREIGN_PLUGIN_FIX = (
    "point devicePlugin.namespace/devicePlugin.name in the operator config at HAMi's plugin "
    "DaemonSet (image projecthami/volcano-vgpu-device-plugin), or replace this DaemonSet by HAMi's "
    "manifest (Project-HAMi/volcano-vgpu-device-plugin volcano-vgpu-device-plugin.yml)"
)


def _image_name(image: str) -> str:
    """`registry/path/name:tag@digest` -> `name`."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def is_hami_workload(view: WorkloadView) -> bool:
    """A container of the workload runs HAMi's vGPU device plugin image."""
    return any(_image_name(c.image) == PLUGIN_IMAGE_HINT for c in view.containers)


def is_hami_plugin(daemonset: Mapping[str, Any]) -> bool:
    """`is_hami_workload` of a raw DaemonSet."""
    return is_hami_workload(workload_view(daemonset))


def foreign_images(view: WorkloadView) -> list[str]:
    """The workload's images, for a message naming what runs instead."""
    return sorted({c.image for c in view.containers})


def foreign_vgpu_plugin(s: ClusterSnapshot) -> tuple[str, str] | None:
    """(namespace, name) of the configured `devicePlugin` DaemonSet when it exists and is not
    HAMi's plugin: the operator patches neither its args nor its placement."""
    view = s.plugin
    if view is None or is_hami_workload(view):
        return None
    return (view.namespace, view.name)
