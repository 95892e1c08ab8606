"""`vgpu-operator cleanup`: leave the cluster as it was before the operator (the Helm chart's
pre-delete hook runs it; it also runs by hand, with or without the operator installed).

In order: stop the operator's own workloads when asked (`--stop-controller`: its Deployment
scaled to 0; `--stop-agent`: the agent DaemonSet deleted; then their pods waited for), so
nothing writes the nodes again behind the cleanup; revert the placement patch of HAMi's plugin
DaemonSets (named by `--config`, the operator's configuration); take off every label, taint and
annotation the operator and its agent own (`core.cleanup`); release the policies' finalizer.
Each write is a PATCH with the resourceVersion it was computed from; an object that changed
meanwhile is read and planned again. Prints every change. Exit code 0 when everything is clean,
1 when something could not be changed, 2 when the cleanup could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from vgpu_operator import kubeapi
from vgpu_operator.core.cleanup import (
    Change,
    finalizer_release,
    node_cleanup,
    operator_taints,
    placement_revert,
)
from vgpu_operator.kubeapi.credentials import CredentialsError, add_connection_arguments, resolve
from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config

EXIT_LEFT = 1
EXIT_CANNOT_RUN = 2
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
    except (OSError, ConfigError) as exc:
        print(
            f"vgpu-operator cleanup: invalid configuration {args.config}:\n{exc}", file=sys.stderr
        )
        return EXIT_CANNOT_RUN
    try:
        stops = (
            _ref(args.stop_controller, "--stop-controller"),
            _ref(args.stop_agent, "--stop-agent"),
        )
    except ValueError as exc:
        print(f"vgpu-operator cleanup: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    cleanup = Cleanup(config, dry_run=args.dry_run, stop_timeout=args.stop_timeout)
    try:
        return asyncio.run(cleanup.run(args.kubeconfig, args.context, *stops))
    except (CredentialsError, kubeapi.Unreachable, OSError) as exc:
        print(f"vgpu-operator cleanup: cannot reach the cluster: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except kubeapi.ApiError as exc:
        print(
            f"vgpu-operator cleanup: the apiserver refused a read ({exc}); the credentials need "
            "list/patch on nodes and vgpunodepolicies, get/patch on the plugin DaemonSets",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN


def _daemonset_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/apps/v1/namespaces/{quote(namespace)}/daemonsets"
    return f"{base}/{quote(name)}" if name else base


def _selector(workload: Mapping[str, Any]) -> str:
    labels = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class Cleanup:
    def __init__(self, config: OperatorConfig, *, dry_run: bool, stop_timeout: float) -> None:
        self.config = config
        self.dry_run = dry_run
        self.stop_timeout = stop_timeout
        self.failed: list[str] = []

    def say(self, line: str) -> None:
        print(line, flush=True)

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
        if self.failed:
            self.say(f"cleanup incomplete: {len(self.failed)} object(s) could not be changed:")
            for line in self.failed:
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
        if controller is not None:
            await self.stop_controller(api, *controller)
        if agent is not None:
            await self.stop_agent(api, *agent)
        nodes = (await kubeapi.list_all(api, kubeapi.node_path())).items
        try:
            policies = (await kubeapi.list_all(api, kubeapi.policy_path())).items
        except kubeapi.NotFound:  # the CRD is gone: no policy holds a finalizer
            policies = []
        taints = operator_taints(nodes, policies)
        plugins = (self.config.device_plugin, self.config.ascend_device_plugin)
        refs = {(ref.namespace, ref.name) for ref in plugins}
        for namespace, name in sorted(refs):
            path = _daemonset_path(namespace, name)
            await self.converge(
                api, path, lambda ds: placement_revert(ds, taints), STRATEGIC_MERGE_PATCH
            )
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name", ""))
            await self.converge(api, kubeapi.node_path(name), node_cleanup, kubeapi.MERGE_PATCH)
        for policy in policies:
            name = str((policy.get("metadata") or {}).get("name", ""))
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
        path = _daemonset_path(namespace, name)
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
