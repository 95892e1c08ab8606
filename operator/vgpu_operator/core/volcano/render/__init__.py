"""Pure renderers: current ConfigMap (or DaemonSet) + desired state -> new data, or unchanged.

Each takes the object as read from the cluster (a plain dict, or None when it does not exist)
and returns a `Rendered` (`changed` False: nothing to write) holding the full new `data` and
the operator's annotations to merge. Keys, sections, plugins and entries the operator does not
own come back exactly as they were.
"""

from __future__ import annotations

from vgpu_operator.core.volcano.render.common import Rendered, RenderError
from vgpu_operator.core.volcano.render.device_config import (
    desired_nvidia,
    render_device_config,
    vnpus_section,
)
from vgpu_operator.core.volcano.render.node_config import (
    ascend_entry,
    node_entry,
    owned_entries,
    render_ascend_node_config,
    render_node_config,
)
from vgpu_operator.core.volcano.render.plugin_args import ArgsPatch, render_plugin_args
from vgpu_operator.core.volcano.render.scheduler_conf import (
    desired_deviceshare_arguments,
    render_scheduler_conf,
)

__all__ = [
    "ArgsPatch",
    "RenderError",
    "Rendered",
    "ascend_entry",
    "desired_deviceshare_arguments",
    "desired_nvidia",
    "node_entry",
    "owned_entries",
    "render_ascend_node_config",
    "render_device_config",
    "render_node_config",
    "render_plugin_args",
    "render_scheduler_conf",
    "vnpus_section",
]
