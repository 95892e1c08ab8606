"""Install Volcano's and HAMi's own manifests, unmodified, into a cluster (tests and the demo).

The files in `data/upstream/` are byte for byte what the projects ship (their README names each
one's repository, tag and path; `FILES` carries their SHA-256, which a unit test checks). They
are applied as they are: no field is changed, so what the operator meets is what a user who
followed the projects' install guides has.

    installed = await install(api)                      # Volcano v1.15.1 + HAMi vGPU v1.12.0
    installed = await install(api, hami="v1.11.0")      # another plugin release
    installed = await install(api, ascend=True)         # + HAMi's Ascend plugin v1.4.0
    ...
    await uninstall(api, installed)                     # namespaces and CRDs stay

What is applied from Volcano's `volcano-development.yaml`: its CRDs, the `volcano-system`
namespace and the scheduler (ServiceAccount, ClusterRole, ClusterRoleBinding, ConfigMap,
Deployment). Its admission webhooks cannot be served where kwok runs the pods (no container
runs): the webhook Deployment, Service, configurations and init Job, the controllers and the
`volcano-monitoring` namespace are left out. Every document of a HAMi file is applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from vgpu_devcluster.install import apply, object_path
from vgpu_operator import kubeapi

DATA = Path(__file__).resolve().parent / "data" / "upstream"


@dataclass(frozen=True)
class UpstreamFile:
    """One file of `data/upstream/` and where it comes from."""

    name: str
    repository: str
    tag: str
    path: str  # in the repository
    sha256: str

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repository}/blob/{self.tag}/{self.path}"

    def text(self) -> str:
        return (DATA / self.name).read_text()

    def documents(self) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.text()) if d]


_VVDP = "Project-HAMi/volcano-vgpu-device-plugin"
_ASCEND = "Project-HAMi/ascend-device-plugin"
FILES: dict[str, UpstreamFile] = {
    f.name: f
    for f in (
        UpstreamFile(
            "volcano-development-v1.15.1.yaml",
            "volcano-sh/volcano",
            "v1.15.1",
            "installer/volcano-development.yaml",
            "b5fb45a57bcd1132be7055354999d244266873710609afd1f162005772d15c41",
        ),
        UpstreamFile(
            "hami-volcano-vgpu-device-plugin-v1.10.0.yml",
            _VVDP,
            "v1.10.0",
            "volcano-vgpu-device-plugin.yml",
            "9c56109a58e4be95e07ed6e2a37287aaf8c2184f279ff1a71dbc630704fed6f4",
        ),
        UpstreamFile(
            "hami-volcano-vgpu-device-plugin-v1.11.0.yml",
            _VVDP,
            "v1.11.0",
            "volcano-vgpu-device-plugin.yml",
            "498187e4fb45f91913e66bbba586a1736da9416fb577f0677041be18ca0e20f2",
        ),
        UpstreamFile(
            "hami-volcano-vgpu-device-plugin-v1.12.0.yml",
            _VVDP,
            "v1.12.0",
            "volcano-vgpu-device-plugin.yml",
            "02f1fc0ce842fd587b7834c6c5f5949399badd0717c3f61170134700bc9d6153",
        ),
        UpstreamFile(
            "hami-ascend-v1.4.0-ascend-device-plugin.yaml",
            _ASCEND,
            "v1.4.0",
            "ascend-device-plugin.yaml",
            "042db3af2d6cc7411e21ec5eba6c41cb21c5485741eaa70a2eedc618c4a05c83",
        ),
        UpstreamFile(
            "hami-ascend-v1.4.0-ascend-device-configmap.yaml",
            _ASCEND,
            "v1.4.0",
            "ascend-device-configmap.yaml",
            "5ee7bb2db517c54f5e0bc8f3897bc8b4660a8927649860fb2d8f76f8bee43723",
        ),
        UpstreamFile(
            "hami-ascend-v1.4.0-ascend-device-node-configmap.yaml",
            _ASCEND,
            "v1.4.0",
            "ascend-device-node-configmap.yaml",
            "29c948785b1ac99f23376a006ae254151b071b511ebe042c163843316f70d389",
        ),
    )
}
VOLCANO_FILE = "volcano-development-v1.15.1.yaml"
HAMI_VGPU_VERSIONS = ("v1.10.0", "v1.11.0", "v1.12.0")
ASCEND_FILES = (
    "hami-ascend-v1.4.0-ascend-device-configmap.yaml",
    "hami-ascend-v1.4.0-ascend-device-node-configmap.yaml",
    "hami-ascend-v1.4.0-ascend-device-plugin.yaml",
)

# The scheduler's part of volcano-development.yaml (besides its CRDs).
SCHEDULER_OBJECTS = frozenset(
    {
        ("Namespace", "volcano-system"),
        ("ServiceAccount", "volcano-scheduler"),
        ("ClusterRole", "volcano-scheduler"),
        ("ClusterRoleBinding", "volcano-scheduler-role"),
        ("ConfigMap", "volcano-scheduler-configmap"),
        ("Deployment", "volcano-scheduler"),
    }
)


def sha256(name: str) -> str:
    return hashlib.sha256((DATA / name).read_bytes()).hexdigest()


def volcano_documents() -> list[dict[str, Any]]:
    """Volcano v1.15.1's CRDs and its scheduler, as shipped (see the module docstring)."""
    return [
        d
        for d in FILES[VOLCANO_FILE].documents()
        if d["kind"] == "CustomResourceDefinition"
        or (d["kind"], d["metadata"]["name"]) in SCHEDULER_OBJECTS
    ]


def hami_vgpu_file(version: str) -> UpstreamFile:
    if version not in HAMI_VGPU_VERSIONS:
        raise ValueError(f"no HAMi vGPU plugin manifest {version}; have {HAMI_VGPU_VERSIONS}")
    return FILES[f"hami-volcano-vgpu-device-plugin-{version}.yml"]


def hami_vgpu_documents(version: str = "v1.12.0") -> list[dict[str, Any]]:
    """HAMi's volcano-vgpu-device-plugin manifest: its two ConfigMaps, RBAC and DaemonSet."""
    return hami_vgpu_file(version).documents()


def ascend_documents() -> list[dict[str, Any]]:
    """HAMi's Ascend plugin v1.4.0: `hami-scheduler-device`, `hami-device-node-config`, the
    plugin's RBAC and DaemonSet."""
    return [d for name in ASCEND_FILES for d in FILES[name].documents()]


@dataclass
class Installed:
    """What `install` applied, in order (what `uninstall` removes)."""

    documents: list[dict[str, Any]] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.documents if d["kind"] == kind]


async def install(
    api: client.ApiClient,
    *,
    volcano: bool = True,
    hami: str | None = "v1.12.0",
    ascend: bool = False,
) -> Installed:
    """Apply the manifests (created, or replaced when they exist): Volcano's scheduler and
    CRDs, HAMi's vGPU plugin of version `hami` (None: none), HAMi's Ascend plugin (`ascend`).
    Namespaces and CRDs go first, workloads last."""
    docs: list[dict[str, Any]] = []
    if volcano:
        docs += volcano_documents()
    if hami is not None:
        docs += hami_vgpu_documents(hami)
    if ascend:
        docs += ascend_documents()
    order = {"Namespace": 0, "CustomResourceDefinition": 0, "DaemonSet": 2, "Deployment": 2}
    docs.sort(key=lambda d: order.get(d["kind"], 1))  # stable: the files' order otherwise
    for doc in docs:
        await apply(api, doc)
    return Installed(docs)


_KEPT = ("Namespace", "CustomResourceDefinition")


async def uninstall(
    api: client.ApiClient,
    installed: Installed,
    *,
    keep: Iterable[str] = _KEPT,
    timeout: float = 60.0,
) -> None:
    """Delete what `install` applied, except the kinds in `keep` (by default namespaces and
    CRDs: deleting them is slow and other objects may live there), and wait until the
    workloads' pods are gone."""
    kept = set(keep)
    selectors: list[tuple[str, str]] = []
    for doc in reversed(installed.documents):
        if doc["kind"] in kept:
            continue
        with contextlib.suppress(kubeapi.NotFound):
            await kubeapi.request(
                api, "DELETE", object_path(doc), query={"propagationPolicy": "Background"}
            )
        if doc["kind"] in ("DaemonSet", "Deployment"):
            labels = doc["spec"]["selector"]["matchLabels"]
            selector = ",".join(f"{k}={v}" for k, v in labels.items())
            selectors.append((doc["metadata"]["namespace"], selector))
    deadline = time.monotonic() + timeout
    for namespace, selector in selectors:
        while True:
            pods = await kubeapi.request(
                api,
                "GET",
                f"/api/v1/namespaces/{namespace}/pods",
                query={"labelSelector": selector},
            )
            if not pods.get("items"):
                break
            for pod in pods["items"]:
                await _release_orphan(api, pod)
            if time.monotonic() > deadline:
                left = "; ".join([await _pod_state(api, p) for p in pods["items"]])
                raise TimeoutError(
                    f"pods {namespace}/{selector} still there after {timeout}s: {left}"
                )
            await asyncio.sleep(0.3)


async def _node(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    """The Node, or None when it is gone."""
    try:
        return await kubeapi.request(api, "GET", kubeapi.node_path(name))
    except kubeapi.NotFound:
        return None


async def _release_orphan(api: client.ApiClient, pod: dict[str, Any]) -> None:
    """Force-delete a pod being deleted whose node is gone: no kubelet (no kwok) will ever
    finalize it. It happens when the controller manager's informers lag: after an apiserver
    restart they come back after client-go's reflector backoff, and a DaemonSet created
    meanwhile got a pod bound to a node deleted 11 s before (measured here; the restart test
    now waits for them, tests/cluster/test_apiserver_restart.py). The pod GC controller would
    force-delete it too, but only once its own node informer misses the node and 40 s of
    quarantine have passed, in a loop of 20 s (kubernetes/kubernetes@v1.35.4:
    pkg/controller/podgc/gc_controller.go `quarantineTime`, `gcCheckPeriod`)."""
    node = pod.get("spec", {}).get("nodeName")
    if not node or "deletionTimestamp" not in pod["metadata"] or await _node(api, node):
        return
    meta = pod["metadata"]
    with contextlib.suppress(kubeapi.NotFound):
        await kubeapi.request(
            api,
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            query={"gracePeriodSeconds": "0"},
        )


async def _pod_state(api: client.ApiClient, pod: dict[str, Any]) -> str:
    """One pod's name, phase, node (gone, or whether kwok manages it) and deletion: what a
    timeout needs to be read."""
    meta, spec = pod["metadata"], pod.get("spec", {})
    where = spec.get("nodeName") or "unbound"
    if spec.get("nodeName"):
        node = await _node(api, spec["nodeName"])
        if node is None:
            where += " (node gone)"
        else:
            annotations = node["metadata"].get("annotations") or {}
            where += f" (kwok: {annotations.get('kwok.x-k8s.io/node', 'no')})"
    deleting = meta.get("deletionTimestamp", "not deleted")
    phase = pod.get("status", {}).get("phase", "?")
    finalizers = meta.get("finalizers") or []
    return f"{meta['name']} {phase} on {where}, deletion {deleting}, finalizers {finalizers}"
