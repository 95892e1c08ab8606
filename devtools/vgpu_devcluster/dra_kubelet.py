"""NVIDIA's DRA driver's kubelet plugin on the local control plane: its DaemonSet as the driver's
chart renders it, and a simulator of the process in each of its pods.

The DaemonSet is the chart's with default values
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/
kubeletplugin.yaml with values.yaml beside it), reduced to what placement reads: one container
(name and image); no nodeSelector (`kubeletPlugin.nodeSelector: {}`), a required node affinity on
any label showing an NVIDIA GPU (`kubeletPlugin.affinity`), the toleration of
`nvidia.com/gpu:NoSchedule` (`kubeletPlugin.tolerations`); its pods' selector label is
`<chart name>-component: kubelet-plugin` (`dra-driver-nvidia-gpu.selectorLabels` in
templates/_helpers.tpl).

The real DaemonSet runs for real here (the controller manager creates its pods, kube-scheduler
places them, kwok marks them Running). `KubeletPluginSimulator` stands in for the process inside
each pod: once a pod runs on a node, it publishes the node's ResourceSlice from the node's
simulated GPUs (`dra_driver`, `dra_publish.publish`), as the real plugin does when it starts
(kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/driver.go
`publishResources`); a new pod on the node publishes again (what the GPUs are then: a static MIG
layout applied while the plugin was paused); once no pod runs there the slices are withdrawn,
as kubelet does for a plugin that has gone. It prepares nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vgpu_devcluster.dra_driver import PluginStartError
from vgpu_devcluster.dra_publish import publish, withdraw
from vgpu_devcluster.fakesmi_state import NodeState
from vgpu_devcluster.passloop import PassLoop
from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import workload_path
from vgpu_operator.models.config_dra import DEFAULT_PLUGIN_DAEMONSET, DEFAULT_PLUGIN_NAMESPACE

log = logging.getLogger("vgpu_operator.dra_kubelet")

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
    """The DaemonSet as the apiserver would return it (a resourceVersion and uid of its own:
    `install_kubelet_plugin` drops them to create it)."""
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


async def install_kubelet_plugin(
    api: Any, namespace: str = DEFAULT_PLUGIN_NAMESPACE, name: str = DEFAULT_PLUGIN_DAEMONSET
) -> dict[str, Any]:
    """Create the DaemonSet (its namespace must exist); returns it as stored."""
    body = kubelet_plugin_daemonset(namespace, name)
    for stored in ("resourceVersion", "uid"):
        body["metadata"].pop(stored)
    path = workload_path("DaemonSet", namespace)
    return await kubeapi.request(api, "POST", path, body=body, field_manager=None)


def _running(pod: dict[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return (
        bool((pod.get("spec") or {}).get("nodeName"))
        and not meta.get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") == "Running"
    )


@dataclass
class KubeletPluginSimulator:
    """`sim.start()` / `await sim.stop()` around a demo, `async with sim:` around a test (its
    slices withdrawn at the end), or `await sim.sync()`.

    `states`: a node's simulated GPUs as NVML shows them (None: the node has none simulated; its
    pod publishes nothing until it has)."""

    api: Any  # a kubernetes_asyncio ApiClient (admin: it writes ResourceSlices as kubelet would)
    states: Callable[[str], NodeState | None]
    namespace: str = DEFAULT_PLUGIN_NAMESPACE
    interval: float = 0.3
    published: dict[str, str] = field(default_factory=dict)  # node -> uid of the pod publishing
    seen: set[str] = field(default_factory=set)  # every node a plugin pod ran on
    failed: dict[str, str] = field(default_factory=dict)  # pod uid -> why it published nothing
    _loop: PassLoop | None = None

    def start(self) -> KubeletPluginSimulator:
        self._loop = PassLoop(
            self.sync, lambda: self.interval, "dra-kubelet-sim", log, "DRA kubelet plugin simulator"
        )
        self._loop.start()
        return self

    async def stop(self, *, withdraw_slices: bool = True) -> None:
        if self._loop is not None:
            await self._loop.stop()
        if withdraw_slices:
            for node in sorted(self.published):
                await withdraw(self.api, node)
            self.published.clear()

    async def __aenter__(self) -> KubeletPluginSimulator:
        return self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def running_pods(self) -> dict[str, str]:
        """node -> uid of the plugin pod Running there."""
        selector = ",".join(f"{k}={v}" for k, v in SELECTOR.items())
        body = await kubeapi.request(
            self.api,
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query={"labelSelector": selector},
        )
        return {
            str(p["spec"]["nodeName"]): str(p["metadata"]["uid"])
            for p in body.get("items") or []
            if _running(p)
        }

    async def sync(self) -> None:
        running = await self.running_pods()
        self.seen.update(running)
        for node, uid in sorted(running.items()):
            if self.published.get(node) == uid or uid in self.failed:
                continue
            state = self.states(node)
            if state is None:
                continue
            try:
                await publish(self.api, node, state)
            except PluginStartError as exc:  # the real plugin's discovery fails: no slice
                self.failed[uid] = str(exc)
                log.info("DRA kubelet plugin on %s publishes nothing: %s", node, exc)
                continue
            self.published[node] = uid
        for node in sorted(set(self.published) - set(running)):
            await withdraw(self.api, node)
            del self.published[node]
