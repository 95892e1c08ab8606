"""A simulated HAMi volcano-vgpu device plugin for the local control plane.

The real plugin needs NVML and a kubelet. Here its DaemonSet runs for real (the controller
manager creates its pods, kube-scheduler places them, kwok marks them Running); this stands in
for the process inside each pod: once per pod (and again when the pod is replaced), it reads
what the real plugin reads at start — the node-config ConfigMap its DaemonSet mounts at
/config, the device ConfigMap `volcano-vgpu-device-config` (kube-system, then volcano-system),
its image version and args — and writes the node's `volcano.sh/node-vgpu-register` (and, up to
v1.12.0, handshake) annotation and the allocatable it would register, computed by
`fakeplugin.simulate_registration`. Nodes without GPUs get nothing (the real plugin fails).
When a node's plugin pod is gone (its DaemonSet no longer places one there, or the DaemonSet is
deleted) and no other runs there, the node's allocatable of the registered resources drops to 0,
as kubelet does when a device plugin disconnects: its devices become unhealthy at once, the
capacity stays for a grace period (kubernetes/kubernetes@v1.35.4:
pkg/kubelet/cm/devicemanager/manager.go `PluginDisconnected`, `GetCapacity`). The register
annotation stays, as the real plugin leaves it. So nodes have vGPU allocatable exactly where a
plugin pod runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from vgpu_devcluster.fakeplugin import PluginRegistration, simulate_registration
from vgpu_devcluster.passloop import PassLoop
from vgpu_operator import kubeapi
from vgpu_operator.core.volcano.render.plugin_args import PLUGIN_IMAGE_HINT
from vgpu_operator.models.volcano import DEFAULT_DEVICE_CONFIG_NAME, PLUGIN_CM_NAMESPACES
from vgpu_operator.models.volcano_views import WorkloadView, workload_view

log = logging.getLogger("vgpu_operator.pluginsim")
FIELD_MANAGER = "volcano-device-plugin-sim"


@dataclass(frozen=True)
class Registration:
    node: str
    pod: str
    pod_uid: str
    mode: str
    problem: str | None


@dataclass
class PluginSimulator:
    """`await sim.sync()` once, or `sim.start()` / `await sim.stop()` around a test."""

    api: Any  # a kubernetes_asyncio ApiClient (admin: it writes Nodes as the plugin would)
    namespace: str = "kube-system"
    name: str = "volcano-device-plugin"
    interval: float = 0.2
    registrations: list[Registration] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)  # nodes whose plugin pod went, in order
    _done: set[str] = field(default_factory=set)
    # node -> (the plugin pod that registered it, the resources it registered)
    _serving: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    _loop: PassLoop | None = None

    def start(self) -> PluginSimulator:
        self._loop = PassLoop(
            self.sync, lambda: self.interval, "plugin-sim", log, "plugin simulator"
        )
        self._loop.start()
        return self

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()

    def registered(self, node: str) -> list[Registration]:
        return [r for r in self.registrations if r.node == node]

    async def sync(self) -> list[Registration]:
        """Register for every Running plugin pod not handled yet, and withdraw the resources of
        nodes whose plugin pod is gone; returns the registrations it made."""
        try:
            ds = await kubeapi.request(
                self.api, "GET", f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets/{self.name}"
            )
        except kubeapi.NotFound:
            await self._withdraw(set())
            return []
        view = workload_view(ds)
        selector = ",".join(f"{k}={v}" for k, v in view.match_labels.items())
        pods = await kubeapi.request(
            self.api,
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query={"labelSelector": selector},
        )
        done: list[Registration] = []
        live: set[str] = set()
        for pod in pods.get("items") or []:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            uid, node = str(meta.get("uid")), spec.get("nodeName")
            running = (pod.get("status") or {}).get("phase") == "Running"
            if not node or not running or meta.get("deletionTimestamp"):
                continue
            live.add(uid)
            if uid in self._done:
                continue
            reg = await self._register(view, pod, str(node))
            self._done.add(uid)
            record = Registration(str(node), str(meta.get("name")), uid, reg.mode, reg.problem)
            self.registrations.append(record)
            done.append(record)
        await self._withdraw(live)
        return done

    async def _withdraw(self, live: set[str]) -> None:
        """Allocatable 0 for the resources of nodes whose registering plugin pod is gone
        (`live`: the uids of the Running plugin pods)."""
        for node in sorted(n for n, (uid, _) in self._serving.items() if uid not in live):
            _, names = self._serving.pop(node)
            self.withdrawn.append(node)
            body = {"status": {"allocatable": dict.fromkeys(names, "0")}}
            try:
                await kubeapi.request(
                    self.api,
                    "PATCH",
                    kubeapi.node_path(node) + "/status",
                    body=body,
                    content_type=kubeapi.MERGE_PATCH,
                    field_manager=FIELD_MANAGER,
                )
            except kubeapi.NotFound:
                continue
            log.info("plugin pod on %s is gone: %s unregistered", node, ", ".join(names))

    async def _configmap_text(self, namespace: str, name: str, key: str) -> str | None:
        try:
            cm = await kubeapi.request(
                self.api, "GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}"
            )
        except kubeapi.NotFound:
            return None
        value = (cm.get("data") or {}).get(key)
        return str(value) if value is not None else None

    async def _node_config(self, view: WorkloadView) -> str | None:
        """config.json from the ConfigMap mounted at /config, as the plugin container sees it."""
        container = view.container(None, PLUGIN_IMAGE_HINT)
        volumes = view.configmap_volumes()
        for mount in container.volume_mounts if container else ():
            if str(mount.get("mountPath", "")).rstrip("/") == "/config":
                cm = volumes.get(str(mount.get("name")))
                return await self._configmap_text(view.namespace, cm, "config.json") if cm else None
        return None

    async def _register(
        self, view: WorkloadView, pod: dict[str, Any], node: str
    ) -> PluginRegistration:
        container = view.container(None, PLUGIN_IMAGE_HINT)
        device_text = None
        for ns in PLUGIN_CM_NAMESPACES:
            device_text = await self._configmap_text(
                ns, DEFAULT_DEVICE_CONFIG_NAME, "device-config.yaml"
            )
            if device_text is not None:
                break
        node_obj = await kubeapi.request(self.api, "GET", kubeapi.node_path(node))
        reg = simulate_registration(
            node_obj,
            await self._node_config(view),
            device_text,
            version=container.version if container else None,
            args=container.args if container else (),
            now=datetime.now(UTC).isoformat(),
        )
        if reg.problem or not reg.gpus:
            log.info("plugin pod on %s registers nothing: %s", node, reg.problem or "no GPUs")
            return reg
        await kubeapi.request(
            self.api,
            "PATCH",
            kubeapi.node_path(node),
            body=reg.metadata_patch(),
            content_type=kubeapi.MERGE_PATCH,
            field_manager=FIELD_MANAGER,
        )
        try:
            await kubeapi.request(
                self.api,
                "PATCH",
                kubeapi.node_path(node) + "/status",
                body=reg.status_patch(),
                content_type=kubeapi.MERGE_PATCH,
                field_manager=FIELD_MANAGER,
            )
        except kubeapi.ApiError as exc:  # e.g. a resource name kubelet would refuse too
            problem = f"kubelet would not register {sorted(reg.allocatable)}: {exc.status}"
            log.info("plugin pod on %s: %s", node, problem)
            return replace(reg, problem=problem)
        self._serving[node] = (str((pod.get("metadata") or {}).get("uid")), sorted(reg.allocatable))
        return reg
