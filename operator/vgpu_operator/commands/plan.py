"""`vgpu-operator plan`: what the operator would do, before it does it.

    vgpu-operator plan -f policy.yaml     # a policy not applied yet (or a change to a live one)
    vgpu-operator plan NAME               # a live policy: what the operator would do now

Shows which nodes enter or leave a pool, which changes are disruptive (a mode or MIG layout
change, with the GPU pods running there) and in what order the rollout takes them, the
ConfigMap diffs, the DaemonSet patches and restarts, and the findings that would appear or go.
Read-only (GETs and LISTs only, as `doctor`); it needs a kubeconfig that may read
VGPUNodePolicies, ConfigMaps, Deployments, DaemonSets, Nodes and Pods. Exit code: 0 when nothing
would change, 1 when something would, 2 on a bad option or input file (invalid YAML, policy or
configuration), 3 when the cluster or a file cannot be reached or read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from vgpu_operator import contract, kubeapi
from vgpu_operator.core.nodes.validate import ParsedPolicy, parse_policy
from vgpu_operator.core.plan import Plan, plan, proposed
from vgpu_operator.kubeapi.credentials import CredentialsError, add_connection_arguments
from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config

EXIT_NO_CHANGE, EXIT_CHANGES, EXIT_USAGE, EXIT_CANNOT = 0, 1, 2, 3  # commands/exitcodes.py


class PlanError(Exception):
    """Bad input: a message naming what is wrong and how to fix it."""


def add_subcommand(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "plan",
        help="what the operator would do for a policy (read-only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", nargs="?", help="a live VGPUNodePolicy")
    parser.add_argument("-f", "--filename", metavar="FILE", help="policy YAML to plan ('-': stdin)")
    add_connection_arguments(parser)
    parser.add_argument(
        "--config", metavar="FILE", help="operator configuration file (default: built-in)"
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "text", "json", "yaml"),
        default="table",
        help="table (text: the same), json or yaml",
    )
    parser.set_defaults(func=cmd_plan)


def policy_documents(text: str, source: str) -> list[dict[str, Any]]:
    """The VGPUNodePolicy documents of a file (other kinds are an error)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise PlanError(f"{source}: not YAML: {exc}") from None
    if not docs:
        raise PlanError(f"{source}: no document; expected a {contract.POLICY_KIND}")
    for i, doc in enumerate(docs):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if kind != contract.POLICY_KIND:
            raise PlanError(
                f"{source}: document {i + 1} is a {kind or type(doc).__name__}; "
                f"`plan -f` takes {contract.POLICY_KIND} documents only"
            )
        if not (doc.get("metadata") or {}).get("name"):
            raise PlanError(f"{source}: document {i + 1} has no metadata.name")
    return docs


def planned_policies(
    live: list[dict[str, Any]], name: str | None, docs: list[dict[str, Any]]
) -> tuple[list[ParsedPolicy], list[str]]:
    """Every policy the operator would see (the live ones, the documents put in place of their
    live versions), and the names planned. Invalid documents are an error naming the field."""
    by_name = {str(p["metadata"]["name"]): p for p in live}
    if name is not None and name not in by_name:
        known = ", ".join(sorted(by_name)) or "none"
        raise PlanError(
            f"no VGPUNodePolicy {name!r} in the cluster (there are: {known}); "
            "for a policy not applied yet use `plan -f FILE`"
        )
    for doc in docs:
        candidate = proposed(by_name, doc)
        parsed = parse_policy(candidate)
        if parsed.problems:
            listed = "\n".join(f"  {p.describe()}" for p in parsed.problems)
            raise PlanError(f"the apiserver would refuse policy {parsed.name}:\n{listed}")
        by_name[parsed.name] = candidate
    names = [name] if name is not None else [str(d["metadata"]["name"]) for d in docs]
    return [parse_policy(p) for p in by_name.values()], names


# --- output ----------------------------------------------------------------------------------


def _owner(name: str | None) -> str:
    return name or "(none)"


def _stamp(t: datetime | None) -> str | None:
    return None if t is None else t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _write(verb: str, kind: str, namespace: str, name: str, body: Any, due: Any) -> dict[str, Any]:
    return {
        "verb": verb,
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "body": body,
        "due": _stamp(due),
    }


def writes_json(p: Plan) -> list[dict[str, Any]]:
    """Every write in the order the operator sends it: the node PATCHes, then the write plan of
    the configuration pass (ConfigMaps, DaemonSet PATCHes, restarts), each with its exact body
    and, for one that waits, when it falls due (`due`: null, it goes now)."""
    out = [_write("PATCH", "Node", "", n.node, n.patch, None) for n in p.nodes if n.patch]
    out += [_write(c.verb, c.kind, c.namespace, c.name, c.body, None) for c in p.configmaps]
    out += [_write(w.verb, w.kind, w.namespace, w.name, w.body, w.due) for w in p.workloads]
    for r in p.restarts:
        out.append(
            _write(r.verb, r.kind, r.namespace, r.name, r.body, r.due) | {"reason": r.reason}
        )
        out += [_write("DELETE", "Pod", r.namespace, pod, None, r.due) for pod in r.pods]
    return out


def format_text(p: Plan, names: list[str]) -> str:
    out = [f"Plan for {', '.join(names)}:"]
    if not p.changes and not any(n.problems for n in p.nodes):
        out.append("  nothing would change.")
    entering = [n for n in p.nodes if n.enters and n.patch is not None]
    leaving = [n for n in p.nodes if n.leaves and n.patch is not None]
    if entering or leaving:
        out.append("\nNodes entering or leaving a pool:")
        out += [f"  + {n.node} -> {n.new_owner} ({n.new_mode})" for n in entering]
        out += [f"  - {n.node} <- {n.old_owner} (to {_owner(n.new_owner)})" for n in leaving]
    updated = [n for n in p.nodes if n.patch is not None]
    if updated:
        out.append("\nNode writes (one merge PATCH each):")
        for n in updated:
            line = f"  {n.node}: {n.action} {_owner(n.old_owner)}/{n.old_mode or '-'} -> "
            line += f"{_owner(n.new_owner)}/{n.new_mode or '-'}"
            if n.disruptive:
                line += f"  DISRUPTIVE: {n.disruptive}"
                line += f"; {len(n.gpu_pods)} GPU pod(s) running"
                line += f": {', '.join(n.gpu_pods)}" if n.gpu_pods else ""
            elif n.change == "restart":
                line += "  (its device plugin pod restarts)"
            out.append(line)
            if n.step:
                out.append(f"    rollout: {n.step}")
    held = [n for n in p.nodes if n.patch is None and n.step]
    if held:
        out.append("\nNodes the rollout holds back:")
        out += [f"  {n.node}: {n.step}" for n in held]
    blocked = [n for n in p.nodes if n.problems]
    if blocked:
        out.append("\nNodes not written:")
        for n in blocked:
            out.append(f"  {n.node} ({n.action}):")
            out += [f"    {problem}" for problem in n.problems]
    if p.rollout:
        out.append("\nRollout order (maxUnavailable at a time):")
        for i, wave in enumerate(p.rollout, start=1):
            when = "now" if wave.now else (f"halted: {wave.halted}" if wave.halted else "then")
            out.append(f"  {i}. {wave.policy}: {', '.join(wave.nodes)} ({when})")
    for cm in p.configmaps:
        verb = "create" if cm.create else "change"
        entries = f" (entries: {', '.join(cm.entries)})" if cm.entries else ""
        out.append(f"\nConfigMap {cm.namespace}/{cm.name}: {verb}{entries}")
        out += ["  " + line for line in cm.diff.splitlines()]
    for w in p.workloads:
        when = f", due {_stamp(w.due)}: it waits for the restart limits" if w.due else ""
        out.append(f"\n{w.kind} {w.namespace}/{w.name}: PATCH (restarts its pods{when})")
        out += [f"  {what}" for what in w.what]
        out.append("  " + json.dumps(w.body, separators=(",", ":"), sort_keys=True))
    if p.restarts:
        out.append("\nRestarts:")
        for r in p.restarts:
            when = f" (due {_stamp(r.due)})" if r.due else ""
            on = f" (the device plugin pod on {r.action.node})" if r.action.node else ""
            out.append(f"  {r.kind} {r.namespace}/{r.name}{on}{when}: {r.reason}")
    if p.appearing:
        out.append("\nFindings that would appear:")
        out += [f"  [{f.severity}] {f.id}: {f.message}" for f in p.appearing]
    if p.resolved:
        out.append("\nFindings that would go:")
        out += [f"  [{f.severity}] {f.id}: {f.message}" for f in p.resolved]
    if p.notes:
        out.append("\nNotes:")
        out += [f"  {note}" for note in p.notes]
    return "\n".join(out) + "\n"


def to_json(p: Plan, names: list[str]) -> dict[str, Any]:
    return {
        "policies": names,
        "changes": p.changes,
        "nodes": [
            {
                "node": n.node,
                "action": n.action,
                "from": {"policy": n.old_owner, "mode": n.old_mode},
                "to": {"policy": n.new_owner, "mode": n.new_mode},
                "enters": n.enters,
                "leaves": n.leaves,
                "change": n.change,
                "disruptive": n.disruptive,
                "gpuPods": list(n.gpu_pods),
                "step": n.step,
                "patch": n.patch,
                "problems": list(n.problems),
            }
            for n in p.nodes
        ],
        "rollout": [
            {"policy": w.policy, "nodes": list(w.nodes), "now": w.now, "halted": w.halted}
            for w in p.rollout
        ],
        "configMaps": [
            {
                "namespace": c.namespace,
                "name": c.name,
                "create": c.create,
                "entries": list(c.entries),
                "diff": c.diff,
            }
            for c in p.configmaps
        ],
        "workloads": [
            {
                "kind": w.kind,
                "namespace": w.namespace,
                "name": w.name,
                "what": list(w.what),
                "body": w.body,
                "due": _stamp(w.due),
            }
            for w in p.workloads
        ],
        "restarts": [
            {
                "kind": r.kind,
                "namespace": r.namespace,
                "name": r.name,
                "reason": r.reason,
                "node": r.action.node,  # a plugin pod's node (None: a rollout restart)
                "due": _stamp(r.due),
            }
            for r in p.restarts
        ],
        "writes": writes_json(p),
        "findings": {
            "appearing": [f.model_dump(mode="json") for f in p.appearing],
            "resolved": [f.model_dump(mode="json") for f in p.resolved],
        },
        "notes": list(p.notes),
    }


# --- the command -----------------------------------------------------------------------------


def _read_file(path: str) -> str:
    return sys.stdin.read() if path == "-" else Path(path).read_text()


async def compute(
    kubeconfig: str | None,
    context: str | None,
    config: OperatorConfig,
    name: str | None,
    docs: list[dict[str, Any]],
    now: datetime | None = None,
) -> tuple[Plan, list[str]]:
    """Read the cluster as `doctor` does, and plan."""
    from vgpu_operator.controller.snapshot import read_snapshot
    from vgpu_operator.kubeapi.credentials import resolve

    api = await resolve(kubeconfig, context).client(pool_size=8, user_agent="vgpu-operator-plan")
    async with api:
        snapshot, listing = await asyncio.gather(
            read_snapshot(api, config), kubeapi.request(api, "GET", kubeapi.policy_path())
        )
    live = [dict(p) for p in listing.get("items") or [] if isinstance(p, Mapping)]
    policies, names = planned_policies(live, name, docs)
    # The rules run in-process here: `doctor` bounds them in a worker; a plan is asked for by
    # a person, on the cluster they are about to change.
    result = await asyncio.to_thread(plan, snapshot, policies, now or datetime.now(UTC))
    return result, names


def cmd_plan(args: argparse.Namespace) -> int:
    def fail(message: str, code: int = EXIT_USAGE) -> int:
        print(f"vgpu-operator plan: {message}", file=sys.stderr)
        return code

    if (args.name is None) == (args.filename is None):
        return fail("give a live policy's NAME or -f FILE (one of the two)")
    try:
        config = load_config(Path(args.config).read_text()) if args.config else OperatorConfig()
    except OSError as exc:
        return fail(f"cannot read {args.config}: {exc.strerror}", EXIT_CANNOT)
    except ConfigError as exc:
        return fail(f"invalid configuration {args.config}:\n{exc}")
    try:
        docs = policy_documents(_read_file(args.filename), args.filename) if args.filename else []
        result, names = asyncio.run(compute(args.kubeconfig, args.context, config, args.name, docs))
    except PlanError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot read: {exc}", EXIT_CANNOT)
    except (CredentialsError, kubeapi.Unreachable) as exc:
        return fail(f"cannot reach the cluster: {exc}", EXIT_CANNOT)
    except kubeapi.ApiError as exc:
        return fail(
            f"the apiserver refused a read ({exc}); the credentials need get/list on "
            "vgpunodepolicies, configmaps, deployments, daemonsets, nodes and pods",
            EXIT_CANNOT,
        )
    if args.output == "json":
        text = json.dumps(to_json(result, names), indent=2) + "\n"
    elif args.output == "yaml":
        text = yaml.safe_dump(to_json(result, names), sort_keys=False, allow_unicode=True)
    else:
        text = format_text(result, names)
    print(text, end="")
    return EXIT_CHANGES if result.changes else EXIT_NO_CHANGE


def main(argv: list[str] | None = None) -> int:
    """`python -m vgpu_operator.commands.plan ...`: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="vgpu-operator")
    add_subcommand(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plan", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
