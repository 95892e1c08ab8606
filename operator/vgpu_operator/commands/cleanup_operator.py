"""The operator's side of `vgpu-operator cleanup` (`cleanup`): while its controller still runs,
the policies are deleted and it moves their nodes out as each policy's `onDelete` says, waited
for within a bound; then the controller and the agent are stopped and their pods waited for, so
nothing writes the nodes again behind the cleanup.

GPU pods are evicted only when asked (`--evict-gpu-pods`; the chart's `cleanup.evictGpuPods`):
each policy is first annotated `vgpu.volcano.sh/evict-gpu-pods` "true" or "false" (the
controller reads it, `core.rollout.decide`). Without it, the controller moves out the nodes
that run no GPU pods (through the gate, as ever) and keeps the others configured; the wait ends
as soon as only those are left, and they are named."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

from vgpu_operator import contract, kubeapi

DEFAULT_LEAVE_TIMEOUT = 240.0  # the chart's cleanup.leaveTimeoutSeconds
POLL_SECONDS = 1.0
SETTLED_EVERY = 5  # polls between reads of the nodes and GPU pods left (nothing evicted)


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _progress(policy: Mapping[str, Any]) -> str:
    """What the controller's status says of a policy being deleted."""
    conditions = (policy.get("status") or {}).get("conditions") or []
    for c in conditions:
        if c.get("type") == "Reconciling" and c.get("message"):
            return str(c["message"])
    return "waiting for the controller to release its nodes"


def daemonset_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/apps/v1/namespaces/{quote(namespace)}/daemonsets"
    return f"{base}/{quote(name)}" if name else base


def _selector(workload: Mapping[str, Any]) -> str:
    labels = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class OperatorHandoff:
    """Waiting for, and stopping, the operator's own workloads (the base of `Cleanup`)."""

    dry_run: bool
    stop_timeout: float
    leave_timeout: float
    on_delete: str  # the operator config's default of a policy's spec.onDelete
    evict_gpu_pods: bool = False  # --evict-gpu-pods: the deletions may drain GPU pods

    async def only_gpu_pod_nodes_left(self, api: Any, policies: set[str]) -> bool:
        """The policies' remaining nodes all run GPU pods (what a deletion that evicts nothing
        keeps): nothing more to wait for. `Cleanup` reads the cluster for it."""
        del api, policies
        return False

    def _how(self, policy: Mapping[str, Any]) -> str:
        """What the controller does with the policy's nodes on its deletion."""
        own = (policy.get("spec") or {}).get("onDelete")
        if (own or self.on_delete) == "Retain":
            return "its nodes were left as they are (onDelete: Retain)"
        return "its nodes have left"

    def say(self, line: str) -> None:
        print(line, flush=True)

    async def policies(self, api: Any) -> list[Mapping[str, Any]]:
        try:
            return list((await kubeapi.list_all(api, kubeapi.policy_path())).items)
        except kubeapi.NotFound:  # the CRD is gone: no policy holds a finalizer
            return []

    # --- letting the running operator move the nodes out ------------------------------------

    async def controller_running(self, api: Any, namespace: str, name: str) -> bool:
        path = f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments/{quote(name)}"
        try:
            deployment = await kubeapi.request(api, "GET", path)
        except kubeapi.NotFound:
            return False
        replicas = (deployment.get("spec") or {}).get("replicas", 1)
        available = (deployment.get("status") or {}).get("availableReplicas") or 0
        return bool(replicas) and available > 0

    async def let_the_operator_leave(self, api: Any, policies: list[Mapping[str, Any]]) -> None:
        """Delete every policy and wait (`leave_timeout`) until the running controller has
        moved their nodes out and released its finalizer: nodes running GPU pods leave through
        the policy's rollout (cordon, drain, release, uncordon), `Retain` policies' nodes are
        left as they are. What it has not finished by then is done directly afterwards."""
        names = [
            name_of(p)
            for p in policies
            if contract.FINALIZER in ((p.get("metadata") or {}).get("finalizers") or [])
        ]
        if not names:
            return
        evict = "true" if self.evict_gpu_pods else "false"
        pods = (
            "nodes running GPU pods drained through its rollout"
            if self.evict_gpu_pods
            else "nodes running GPU pods kept configured, no pod evicted (--evict-gpu-pods not "
            "given)"
        )
        if self.dry_run:
            for name in names:
                self.say(
                    f"vgpunodepolicy {name}: (dry run, not done) would be annotated "
                    f"{contract.ANN_EVICT_GPU_PODS}={evict}, deleted and its nodes moved out by "
                    f"the running controller ({pods}; waiting up to {self.leave_timeout:.0f}s)"
                )
            return
        for name in names:
            with contextlib.suppress(kubeapi.NotFound):
                body = {"metadata": {"annotations": {contract.ANN_EVICT_GPU_PODS: evict}}}
                path = kubeapi.policy_path(name)
                await kubeapi.request(
                    api, "PATCH", path, body=body, content_type=kubeapi.MERGE_PATCH
                )
                await kubeapi.request(api, "DELETE", path)
            self.say(f"vgpunodepolicy {name}: deleted; the controller moves its nodes out ({pods})")
        deadline = time.monotonic() + self.leave_timeout
        how = {name_of(p): self._how(p) for p in policies}
        pending, said = set(names), dict.fromkeys(names, "")
        polls = 0
        while True:
            waiting = {}
            for policy in await self.policies(api):
                name = name_of(policy)
                if name in pending and contract.FINALIZER in (
                    (policy.get("metadata") or {}).get("finalizers") or []
                ):
                    waiting[name] = _progress(policy)
            for name, text in sorted(waiting.items()):
                if said.get(name) != text:
                    said[name] = text
                    self.say(f"vgpunodepolicy {name}: {text}")
            for name in sorted(pending - set(waiting)):
                self.say(f"vgpunodepolicy {name}: {how[name]}; finalizer released")
            pending = set(waiting)
            if not pending:
                return
            polls += 1
            if (
                not self.evict_gpu_pods
                and polls % SETTLED_EVERY == 0
                and await self.only_gpu_pod_nodes_left(api, pending)
            ):
                self.say(
                    f"{len(pending)} policy(ies) ({', '.join(sorted(pending))}): every node left "
                    "runs GPU pods and keeps its configuration (no pod is evicted without "
                    "--evict-gpu-pods); they are named below"
                )
                return
            if time.monotonic() >= deadline:
                self.say(
                    f"{len(waiting)} policy(ies) still releasing nodes after "
                    f"{self.leave_timeout:.0f}s ({', '.join(sorted(waiting))}); the rest is "
                    "removed directly (nodes still running GPU pods are skipped unless --force)"
                )
                return
            await asyncio.sleep(POLL_SECONDS)

    # --- stopping the operator first ------------------------------------------------------

    async def stop_controller(self, api: Any, namespace: str, name: str) -> None:
        path = f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments/{quote(name)}"
        try:
            deployment = await kubeapi.request(api, "GET", path)
        except kubeapi.NotFound:
            self.say(f"deployment {namespace}/{name}: not found (the controller is gone)")
            return
        if not self.dry_run:
            await kubeapi.request(
                api,
                "PATCH",
                path + "/scale",
                body={"spec": {"replicas": 0}},
                content_type=kubeapi.MERGE_PATCH,
            )
        did = "would scale to 0" if self.dry_run else "scaled to 0 (the controller writes no more)"
        self.say(f"deployment {namespace}/{name}: {did}")
        await self._pods_gone(api, namespace, _selector(deployment))

    async def stop_agent(self, api: Any, namespace: str, name: str) -> None:
        path = daemonset_path(namespace, name)
        try:
            daemonset = await kubeapi.request(api, "GET", path)
        except kubeapi.NotFound:
            self.say(f"daemonset {namespace}/{name}: not found (the agent is gone)")
            return
        if not self.dry_run:
            with contextlib.suppress(kubeapi.NotFound):
                await kubeapi.request(api, "DELETE", path, body={"propagationPolicy": "Background"})
        did = "would delete" if self.dry_run else "deleted (the agent writes no more)"
        self.say(f"daemonset {namespace}/{name}: {did}")
        await self._pods_gone(api, namespace, _selector(daemonset))

    async def _pods_gone(self, api: Any, namespace: str, selector: str) -> None:
        """Wait until no pod of the workload runs: one stopping may still be writing (the
        agent finishes a MIG change it started within its grace period)."""
        if self.dry_run or not selector:
            return
        path = f"/api/v1/namespaces/{quote(namespace)}/pods"
        options = kubeapi.WatchOptions(label_selector=selector)

        async def count() -> int:
            return len((await kubeapi.list_all(api, path, options)).items)

        await _until(count, self.stop_timeout, f"pods {selector} in {namespace}", self.say)


async def _until(
    count: Callable[[], Awaitable[int]], timeout: float, what: str, say: Callable[[str], None]
) -> None:
    deadline = time.monotonic() + timeout
    left = await count()
    while left and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        left = await count()
    if left:
        say(f"{what}: {left} still there after {timeout:.0f}s; cleaning up anyway")
