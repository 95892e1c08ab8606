"""`vgpu-operator plan`: what the operator would do, before it does it.

    vgpu-operator plan -f policy.yaml     # a policy not applied yet (or a change to a live one)
    vgpu-operator plan NAME               # a live policy: what the operator would do now
    vgpu-operator plan --snapshot FILE -f policy.yaml   # the same, offline

Shows which nodes enter or leave a pool, which changes are disruptive (a mode or MIG layout
change, with the GPU pods running there) and in what order the rollout takes them, the
ConfigMap diffs, the DaemonSet patches and restarts, and the findings that would appear or go.

What it reads from the cluster (GETs and LISTs only, as `doctor`): every VGPUNodePolicy, Node,
DaemonSet and running Pod, the ResourceClaims' drivers (where it may list them), the scheduler
Deployment and the ConfigMaps the operator configuration names; its kubeconfig must allow that.
The operator configuration is the one `--config` names, else the running operator's, found in
the cluster as `doctor` finds it (the chart's ConfigMap), else the built-in default; stderr
says which. Names given as `auto` in the configuration are resolved from the cluster first, as
`doctor` resolves them.

--snapshot FILE reads no cluster and needs no kubeconfig: it plans over what `vgpu-operator
doctor --save-snapshot FILE` read, as of the time it read it, with the operator configuration
recorded there; --config FILE, when given, wins over the recorded one. Its output is the one
the command would have printed against that cluster at that time.

Exit code: 0 when nothing would change, 1 when something would, 2 on a bad option or input file
(invalid YAML, policy, configuration or snapshot; two operator ConfigMaps in the cluster and no
`--config`), 3 when the cluster or a file cannot be reached or read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from vgpu_operator import contract, kubeapi
from vgpu_operator.commands import snapshot_file
from vgpu_operator.commands.plan_output import format_text, to_json
from vgpu_operator.commands.running_config import (
    ConfigLookupError,
    announce,
    from_file,
    running_config,
)
from vgpu_operator.commands.snapshot_file import ClusterRead, read_cluster
from vgpu_operator.core.nodes.validate import ParsedPolicy, parse_policy
from vgpu_operator.core.plan import Plan, plan, proposed
from vgpu_operator.kubeapi.credentials import CredentialsError, add_connection_arguments
from vgpu_operator.models.config import ConfigError, OperatorConfig

EXIT_NO_CHANGE, EXIT_CHANGES, EXIT_USAGE, EXIT_CANNOT = 0, 1, 2, 3  # commands/exitcodes.py
# The output (`to_json`, `format_text`) is plan_output's, exported here with the command.
__all__ = ["PlanError", "compute", "format_text", "plan_over", "planned_policies", "to_json"]


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
        "--config",
        metavar="FILE",
        help="operator configuration file (default: the running operator's, read from the "
        "cluster, else built-in; with --snapshot: the one the snapshot recorded, and this file "
        "wins when given)",
    )
    parser.add_argument(
        "--snapshot",
        metavar="FILE",
        help="plan offline over a snapshot saved by `doctor --save-snapshot FILE` (no cluster)",
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


# --- the command -----------------------------------------------------------------------------


def _read_file(path: str) -> str:
    return sys.stdin.read() if path == "-" else Path(path).read_text()


def plan_over(
    read: ClusterRead, name: str | None, docs: list[dict[str, Any]], now: datetime
) -> tuple[Plan, list[str]]:
    """The plan of one read of the cluster (online or from a snapshot file) at `now`."""
    policies, names = planned_policies(read.policies, name, docs)
    return plan(read.snapshot, policies, now), names


async def compute(
    kubeconfig: str | None,
    context: str | None,
    config: OperatorConfig | None,
    name: str | None,
    docs: list[dict[str, Any]],
    now: datetime | None = None,
) -> tuple[Plan, list[str]]:
    """Read the cluster as `doctor` does, and plan with `config` (None: the running operator's,
    read from the cluster and said on stderr; ConfigLookupError when it cannot be used)."""
    from vgpu_operator.controller.discovery import read_and_discover
    from vgpu_operator.kubeapi.credentials import resolve

    api = await resolve(kubeconfig, context).client(pool_size=8, user_agent="vgpu-operator-plan")
    async with api:
        if config is None:
            source = await running_config(api)
            announce("plan", source)
            config = source.config
        discovery = await read_and_discover(api, config)  # reads nothing without an `auto`
        read = await read_cluster(api, discovery.config)
    # The rules run in-process here: `doctor` bounds them in a worker; a plan is asked for by
    # a person, on the cluster they are about to change.
    return await asyncio.to_thread(plan_over, read, name, docs, now or read.read_at)


def _offline(
    path: str, config: OperatorConfig | None, name: str | None, docs: list[dict[str, Any]]
) -> tuple[Plan, list[str]]:
    """Plan over a snapshot file, at the time it was read (what `compute` would have said)."""
    read = snapshot_file.load(path, config)
    for note in read.notes:
        print(f"vgpu-operator plan: note: {note}", file=sys.stderr)
    return plan_over(read, name, docs, read.read_at)


def cmd_plan(args: argparse.Namespace) -> int:
    def fail(message: str, code: int = EXIT_USAGE) -> int:
        print(f"vgpu-operator plan: {message}", file=sys.stderr)
        return code

    if (args.name is None) == (args.filename is None):
        return fail("give a live policy's NAME or -f FILE (one of the two)")
    if args.snapshot and (args.kubeconfig or args.context):
        return fail("--snapshot reads no cluster: leave out --kubeconfig and --context")
    try:
        source = from_file(args.config) if args.config else None
    except OSError as exc:
        return fail(f"cannot read {args.config}: {exc.strerror}", EXIT_CANNOT)
    except ConfigError as exc:
        return fail(f"invalid configuration {args.config}:\n{exc}")
    config = source.config if source is not None else None
    if args.snapshot and config is not None and config.auto_fields():
        return fail(
            f"{args.config} has names to resolve from the cluster "
            f"({', '.join(config.auto_fields())}), which a snapshot cannot: write them out, "
            "or leave out --config to plan with the snapshot's configuration (resolved)"
        )
    try:
        docs = policy_documents(_read_file(args.filename), args.filename) if args.filename else []
        if args.snapshot:
            result, names = _offline(args.snapshot, config, args.name, docs)
        else:
            if source is not None:
                announce("plan", source)
            result, names = asyncio.run(
                compute(args.kubeconfig, args.context, config, args.name, docs)
            )
    except (snapshot_file.SnapshotFileError, ConfigLookupError) as exc:
        return fail(str(exc), exc.code)
    except PlanError as exc:
        return fail(str(exc))
    except ConfigError as exc:
        return fail(f"what was discovered is not a valid configuration:\n{exc}", EXIT_CANNOT)
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
