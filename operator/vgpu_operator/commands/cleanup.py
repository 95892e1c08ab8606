"""`vgpu-operator cleanup`: leave the cluster as it was before the operator (the Helm chart's
pre-delete hook runs it; it also runs by hand, with or without the operator installed).

In order: while the controller named by `--stop-controller` still runs, delete every policy and
let it move the nodes out as each policy's `onDelete` says (`Delete`: through "Safe
transitions", `maxUnavailable` at a time; `Retain`: left as they are), waiting at most `--timeout`
seconds for the policies' finalizers. No GPU pod is evicted unless `--evict-gpu-pods` is given
(then nodes that run GPU pods are drained first, through the policy's rollout); without it such
a node keeps its configuration, its policy its finalizer, and both are named; then stop the
operator's own workloads (`--stop-controller`: its Deployment scaled to 0; `--stop-agent`: the
agent DaemonSet deleted; then their pods waited for), so nothing writes the nodes again behind
the cleanup; revert the placement patch of HAMi's plugin DaemonSets (named by `--config`, the
operator's configuration) unless retained nodes still need it; on every node, what is left:
a `Retain` policy's node is marked retained and left as it is, any other is stripped of every
label, taint and annotation the operator and its agent own (`core.cleanup`), except a node that
still runs GPU pods, which is skipped and named unless `--force` (`core.cleanup_nodes`); release
the policies' finalizer (a deleted policy whose skipped nodes still carry it keeps it, so the
cleanup can be run again once they are drained, or with `--evict-gpu-pods`). Each write is a
PATCH with the resourceVersion it was computed from; an object that changed meanwhile is read
and planned again. Prints every change. Exit code 0 when
everything is clean, 1 when something could not be changed or a node was skipped, 2 on a bad
option or an invalid configuration file, 3 when the cluster or a file cannot be reached or read.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.commands.cleanup_operator import (
    DEFAULT_LEAVE_TIMEOUT,
    OperatorHandoff,
    daemonset_path,
    name_of,
)
from vgpu_operator.core.cleanup import (
    Change,
    finalizer_release,
    operator_taints,
    placement_revert,
)
from vgpu_operator.core.cleanup_nodes import (
    finalizers_kept,
    node_outcome,
    only_gpu_pod_nodes_left,
    retained_policies,
    retaining_node,
)
from vgpu_operator.core.rollout.gpu_pods import gpu_pod_of, gpu_resources, holds_gpu, plugin_refs
from vgpu_operator.kubeapi.credentials import CredentialsError, add_connection_arguments, resolve
from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config

EXIT_LEFT = 1
EXIT_USAGE, EXIT_CANNOT_RUN = 2, 3  # commands/exitcodes.py
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
ATTEMPTS = 5  # re-reads of one object that keeps changing under the cleanup


def add_subcommand(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "cleanup",
        help="remove everything the operator put on nodes, plugin DaemonSets and policies",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_arguments(parser)
    parser.add_argument(
        "--config", metavar="FILE", help="operator configuration file (default: built-in)"
    )
    parser.add_argument(
        "--stop-controller",
        metavar="NAMESPACE/NAME",
        help="first scale the controller's Deployment to 0 and wait for its pods to end",
    )
    parser.add_argument(
        "--stop-agent",
        metavar="NAMESPACE/NAME",
        help="first delete the agent's DaemonSet and wait for its pods to end",
    )
    parser.add_argument(
        "--stop-timeout", type=float, default=180.0, metavar="S", help="wait for the pods (180)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_LEAVE_TIMEOUT,
        metavar="S",
        help="with a running controller (--stop-controller): wait this long for it to move the "
        f"deleted policies' nodes out ({DEFAULT_LEAVE_TIMEOUT:.0f})",
    )
    parser.add_argument(
        "--evict-gpu-pods",
        action="store_true",
        help="let the running controller drain nodes that run GPU pods (evicted through the "
        "Eviction API, each policy's rollout.maxUnavailable at a time); without it no GPU pod is "
        "evicted and such nodes keep their configuration",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="also strip nodes that still run GPU pods (their GPUs are offered to other pods)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would change only")
    parser.set_defaults(func=cmd_cleanup)


def _ref(text: str | None, option: str) -> tuple[str, str] | None:
    if not text:
        return None
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"{option} takes NAMESPACE/NAME, got {text!r}")
    return namespace, name


def cmd_cleanup(args: argparse.Namespace) -> int:
    try:
        config = load_config(Path(args.config).read_text()) if args.config else OperatorConfig()
    except OSError as exc:
        print(f"vgpu-operator cleanup: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except ConfigError as exc:
        print(
            f"vgpu-operator cleanup: invalid configuration {args.config}:\n{exc}", file=sys.stderr
        )
        return EXIT_USAGE
    try:
        stops = (
            _ref(args.stop_controller, "--stop-controller"),
            _ref(args.stop_agent, "--stop-agent"),
        )
    except ValueError as exc:
        print(f"vgpu-operator cleanup: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cleanup = Cleanup(
        config,
        dry_run=args.dry_run,
        stop_timeout=args.stop_timeout,
        leave_timeout=args.timeout,
        force=args.force,
        evict_gpu_pods=args.evict_gpu_pods,
    )
    try:
        return asyncio.run(cleanup.run(args.kubeconfig, args.context, *stops))
    except (CredentialsError, kubeapi.Unreachable, OSError) as exc:
        print(f"vgpu-operator cleanup: cannot reach the cluster: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except kubeapi.ApiError as exc:
        print(
            f"vgpu-operator cleanup: the apiserver refused a read ({exc}); the credentials need "
            "list/patch on nodes and vgpunodepolicies (delete with --stop-controller), list on "
            "pods, get/patch on the plugin DaemonSets",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN


RUNNING_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


class Cleanup(OperatorHandoff):
    def __init__(
        self,
        config: OperatorConfig,
        *,
        dry_run: bool,
        stop_timeout: float,
        leave_timeout: float = DEFAULT_LEAVE_TIMEOUT,
        force: bool = False,
        evict_gpu_pods: bool = False,
    ) -> None:
        self.config = config
        self.dry_run = dry_run
        self.stop_timeout = stop_timeout
        self.leave_timeout = leave_timeout
        self.on_delete = config.on_delete
        self.force = force
        self.evict_gpu_pods = evict_gpu_pods
        self.failed: list[str] = []
        self.skipped: list[str] = []
        self.skipped_nodes: set[str] = set()

    async def run(
        self,
        kubeconfig: str | None,
        context: str | None,
        controller: tuple[str, str] | None = None,
        agent: tuple[str, str] | None = None,
    ) -> int:
        api = await resolve(kubeconfig, context).client(
            pool_size=4, user_agent="vgpu-operator-cleanup"
        )
        async with api:
            await self.run_with(api, controller, agent)
        verb = "would change" if self.dry_run else "changed"
        if self.failed or self.skipped:
            if self.failed:
                self.say(f"cleanup incomplete: {len(self.failed)} object(s) could not be changed:")
            for line in self.failed:
                self.say(f"  {line}")
            if self.skipped:
                self.say(
                    f"cleanup incomplete: {len(self.skipped)} node(s) left configured (GPU pods "
                    "run on them, and cleanup evicts none unless told: drain them and run it "
                    "again, or run it with --evict-gpu-pods (the chart: cleanup.evictGpuPods: "
                    "true) to drain them through the policies' rollout; --force strips them "
                    "under their pods):"
                )
            for line in self.skipped:
                self.say(f"  {line}")
            return EXIT_LEFT
        self.say(f"cleanup done ({verb} what is listed above)")
        return 0

    async def run_with(
        self,
        api: Any,
        controller: tuple[str, str] | None = None,
        agent: tuple[str, str] | None = None,
    ) -> None:
        """The whole cleanup on an open client (the tests call this too)."""
        if controller is not None and await self.controller_running(api, *controller):
            await self.let_the_operator_leave(api, await self.policies(api))
        if controller is not None:
            await self.stop_controller(api, *controller)
        if agent is not None:
            await self.stop_agent(api, *agent)
        nodes = (await kubeapi.list_all(api, kubeapi.node_path())).items
        policies = await self.policies(api)
        default = self.config.on_delete
        retained = retained_policies(policies, default)
        known = {name_of(p) for p in policies}
        kept = [n for n in nodes if retaining_node(n, retained, known, default)]
        taints = operator_taints(nodes, policies)
        refs = set(plugin_refs(self.config))  # HAMi's plugins, the DRA kubelet plugin
        placed = [name_of(n) for n in kept if contract.LABEL_DEVICE_PLUGIN in _labels(n)]
        for namespace, name in sorted(refs):
            path = daemonset_path(namespace, name)
            if placed:
                self.say(
                    f"daemonset {namespace}/{name}: left the operator's placement patch: "
                    f"retained node(s) {', '.join(placed[:5])} still carry "
                    f"{contract.LABEL_DEVICE_PLUGIN} and their taints (onDelete: Retain)"
                )
                continue
            await self.converge(
                api, path, lambda ds: placement_revert(ds, taints), STRATEGIC_MERGE_PATCH
            )
        pods = await self.gpu_pods(api)
        for node in nodes:
            name = name_of(node)
            retain = retaining_node(node, retained, known, default)

            def plan(raw: Mapping[str, Any], retain: bool = retain, name: str = name) -> Change:
                outcome = node_outcome(
                    raw, retain=retain, gpu_pods=pods.get(name, ()), force=self.force
                )
                if outcome.skipped is not None and name not in self.skipped_nodes:
                    self.skipped_nodes.add(name)
                    self.skipped.append(f"node {name}: {outcome.skipped}")
                return outcome.change

            await self.converge(api, kubeapi.node_path(name), plan, kubeapi.MERGE_PATCH)
        holding = finalizers_kept(nodes, policies, self.skipped_nodes)
        for policy in policies:
            name = name_of(policy)
            if name in holding:
                self.say(
                    f"vgpunodepolicy {name}: kept its finalizer: node(s) "
                    f"{', '.join(holding[name][:5])} still carry its configuration (GPU pods run "
                    "there); run cleanup again once they are drained, or with --evict-gpu-pods"
                )
                continue
            await self.converge(
                api, kubeapi.policy_path(name), finalizer_release, kubeapi.MERGE_PATCH
            )

    async def converge(
        self,
        api: Any,
        path: str,
        plan: Callable[[Mapping[str, Any]], Change],
        content_type: str,
    ) -> None:
        """Read, plan, PATCH; again on a conflict (the object changed since it was read)."""
        for _ in range(ATTEMPTS):
            try:
                current = await kubeapi.request(api, "GET", path)
            except kubeapi.NotFound:
                return
            change = plan(current)
            if change.patch is None:
                self._report(change, written=False)
                return
            if self.dry_run:
                self._report(change, written=True)
                return
            try:
                await kubeapi.request(
                    api, "PATCH", path, body=change.patch, content_type=content_type
                )
            except (kubeapi.Conflict, kubeapi.NotFound):
                continue
            except kubeapi.ApiError as exc:
                self.failed.append(f"{change.ref}: {exc}")
                self.say(f"{change.ref}: refused: {exc}")
                return
            self._report(change, written=True)
            return
        self.failed.append(f"{path}: changed {ATTEMPTS} times while the cleanup planned it")

    def _report(self, change: Change, *, written: bool) -> None:
        prefix = "(dry run, not done) " if self.dry_run else ""
        if written:
            for line in change.did:
                self.say(f"{change.ref}: {prefix}{line}")
        for line in change.left:
            self.say(f"{change.ref}: left {line}")

    async def only_gpu_pod_nodes_left(self, api: Any, policies: set[str]) -> bool:
        nodes = (await kubeapi.list_all(api, kubeapi.node_path())).items
        return only_gpu_pod_nodes_left(nodes, policies, set(await self.gpu_pods(api)))

    async def gpu_pods(self, api: Any) -> dict[str, tuple[str, ...]]:
        """Node -> the GPU pods running on it (what the controller's pod index holds: pods
        requesting a GPU resource, not finished, not a DaemonSet's)."""
        options = kubeapi.WatchOptions(field_selector=RUNNING_PODS)
        listed = (await kubeapi.list_all(api, "/api/v1/pods", options)).items
        resources = gpu_resources(self.config)
        out: dict[str, list[str]] = {}
        for pod in listed:
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            held = gpu_pod_of(pod) if node and holds_gpu(pod, resources) else None
            if held is not None:
                out.setdefault(node, []).append(held.key)
        return {node: tuple(sorted(keys)) for node, keys in out.items()}
