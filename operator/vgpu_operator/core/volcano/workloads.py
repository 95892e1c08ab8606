"""Where each component's files come from, and which workload is which component: the part of
discovery (core.volcano.discovery) that reads Deployments and DaemonSets as the kubelet mounts
them."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_operator.core.volcano.render.plugin_args import PLUGIN_IMAGE_HINT
from vgpu_operator.models.config_refs import AUTO
from vgpu_operator.models.volcano_views import ContainerView, WorkloadView

SCHEDULER_IMAGE_HINT = "vc-scheduler"
ASCEND_IMAGE_HINT = "ascend-device-plugin"  # how the Ascend plugin's container is recognised
SCHEDULER_CONF_FLAG = "scheduler-conf"


@dataclass(frozen=True)
class FileSource:
    """Where a file a container reads comes from: a ConfigMap (name, key) in the pod's
    namespace."""

    configmap: str
    key: str


def file_source(workload: WorkloadView, container: ContainerView, path: str) -> FileSource | None:
    """The ConfigMap and key behind `path` in `container`, as the kubelet mounts it: a mount at
    the file itself (subPath: that key), or at a directory above it (the key is the path below
    the mount, or the `items` entry whose path it is)."""
    volumes = {str(v.get("name")): v for v in workload.volumes}
    path = posixpath.normpath(path)
    for mount in container.volume_mounts:
        mount_path = posixpath.normpath(str(mount.get("mountPath", "")))
        volume = volumes.get(str(mount.get("name")))
        cm = volume.get("configMap") if volume else None
        if not isinstance(cm, Mapping) or not cm.get("name"):
            continue
        sub = str(mount.get("subPath") or "")
        if sub and mount_path == path:
            return FileSource(str(cm["name"]), _key_for(cm, sub))
        if not sub and path.startswith(mount_path.rstrip("/") + "/"):
            return FileSource(str(cm["name"]), _key_for(cm, path[len(mount_path) :].lstrip("/")))
    return None


def _key_for(cm: Mapping[str, Any], relative: str) -> str:
    for item in cm.get("items") or []:
        if isinstance(item, Mapping) and item.get("path") == relative:
            return str(item.get("key", relative))
    return relative


def flag_value(container: ContainerView, name: str) -> str | None:
    flag = container.flags.get(name)
    return flag.value if flag is not None else None


# --- picking the components' workloads -------------------------------------------------------


@dataclass(frozen=True)
class Found:
    workload: WorkloadView | None
    container: ContainerView | None
    why: str
    problem: str = ""


def pick(
    views: Sequence[WorkloadView],
    explicit: tuple[str, str] | None,
    matches: Callable[[ContainerView], bool],
    preferred_name: str,
    what: str,
) -> Found:
    """The workload of a component: the one named (explicit), else the only match, else the one
    with the upstream name among several; with the container that matches."""
    if explicit is not None:
        for v in views:
            if (v.namespace, v.name) == explicit:
                return Found(v, _container(v, matches), f"{what} as configured")
        return Found(None, None, f"{what} {explicit[0]}/{explicit[1]} (configured) not found")
    found = [v for v in views if _container(v, matches) is not None]
    found.sort(key=lambda v: (v.name != preferred_name, v.namespace, v.name))
    if not found:
        return Found(None, None, f"no {what} found in the cluster")
    chosen = found[0]
    names = ", ".join(f"{v.namespace}/{v.name}" for v in found)
    why = f"the {what} found in the cluster"
    problem = ""
    if len(found) > 1:
        why = f"{len(found)} {what}s found ({names}); took {chosen.namespace}/{chosen.name}"
        problem = f"{why}: set it explicitly if that is not the one"
    return Found(chosen, _container(chosen, matches), why, problem)


def _container(
    view: WorkloadView, matches: Callable[[ContainerView], bool]
) -> ContainerView | None:
    for c in view.containers:
        if matches(c):
            return c
    return None


def is_scheduler(c: ContainerView) -> bool:
    return SCHEDULER_CONF_FLAG in c.flags or SCHEDULER_IMAGE_HINT in c.image


def is_vgpu_plugin(c: ContainerView) -> bool:
    return PLUGIN_IMAGE_HINT in c.image and "monitor" not in c.name + " ".join(c.args)


def is_ascend_plugin(c: ContainerView) -> bool:
    return ASCEND_IMAGE_HINT in c.image


def explicit(namespace: str, name: str) -> tuple[str, str] | None:
    return None if AUTO in (namespace, name) else (namespace, name)
