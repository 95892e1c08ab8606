"""`vgpu-operator doctor`: run every consistency rule against a cluster and say what is wrong.

Read-only (GETs and LISTs only) and independent of the operator: it needs a kubeconfig that may
read ConfigMaps, Deployments, DaemonSets, Nodes and Pods, and nothing of the operator installed
(it lists the VGPUNodePolicies for the policy-keys rule where it may, and skips them where the
CRD is missing or the credentials may not; and reads by name the admission policies and bindings
the configuration's `admissionPolicies` names, for the rule admission-policies).
The operator configuration (resource names, where each component lives) is the one `--config`
names; without it, the one the running operator uses, read from the cluster (the chart's
ConfigMap `<release>-config`, key config.yaml, found in any namespace by its label
app.kubernetes.io/name=vgpu-operator), else the built-in default; stderr says which. Names
given as `auto` there are resolved from the cluster as the operator resolves them at start, and
printed with why; `--discover` resolves every name that way (a cluster set up by hand, e.g. in
volcano-system).
`--list-rules` lists every rule and what it checks, without a cluster.

`--save-snapshot FILE` also writes what was read to FILE (JSON: the objects, every
VGPUNodePolicy, the operator configuration they were read with, `auto` resolved, and when), for
`vgpu-operator plan --snapshot FILE` to plan over without a cluster; for that it lists the
VGPUNodePolicies too (a cluster without their CRD is saved with none). No Secret is read or
saved.

Exit code: 0 when nothing is wrong (notes only), 1 when a rule found an error or a warning, 2 on
a bad option or an invalid configuration (file or ConfigMap; two operator ConfigMaps in the
cluster and no `--config`), 3 when the cluster or a file cannot be reached, read or (the
snapshot) written (the table below).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.commands import exitcodes
from vgpu_operator.commands.running_config import (
    ConfigLookupError,
    announce,
    from_file,
    running_config,
)
from vgpu_operator.commands.snapshot_file import ClusterRead, SnapshotFileError, read_cluster, save
from vgpu_operator.kubeapi.credentials import CredentialsError, add_connection_arguments
from vgpu_operator.models.config import ConfigError, OperatorConfig
from vgpu_operator.models.config_refs import AUTO

EXIT_USAGE, EXIT_CANNOT_RUN = exitcodes.USAGE, exitcodes.CANNOT


def add_subcommand(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "doctor",
        help="check the Volcano/HAMi vGPU configuration of a cluster (read-only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_arguments(parser)
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="operator configuration file (default: the running operator's, read from the "
        "cluster; else built-in)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    parser.add_argument(
        "--rule",
        action="append",
        metavar="ID",
        help="run only this rule (repeatable); default: every rule",
    )
    parser.add_argument(
        "--discover",
        action="store_true",
        help="resolve every namespace, name and resource name from the cluster (as 'auto')",
    )
    parser.add_argument(
        "--list-rules", action="store_true", help="list every rule and what it checks, and exit"
    )
    parser.add_argument(
        "--save-snapshot",
        metavar="FILE",
        help="also write what was read to FILE, for `plan --snapshot FILE` (offline)",
    )
    parser.set_defaults(func=cmd_doctor)


def _load(path: str | None) -> OperatorConfig | None:
    """The file's configuration, said on stderr; None: the running operator's, looked up in the
    cluster (commands/running_config.py)."""
    if not path:
        return None
    source = from_file(path)
    announce("doctor", source)
    return source.config


# Every reference and name discovery can resolve (models/config.py `auto_fields`).
AUTO_REFS = (
    "resourceNames",
    "deviceConfig",
    "nodeConfig",
    "ascendNodeConfig",
    "devicePlugin",
    "ascendDevicePlugin",
)


def all_auto(config: OperatorConfig) -> OperatorConfig:
    """`config` with every name to be resolved from the cluster."""
    data = config.model_dump(by_alias=True, exclude_none=True)
    data.update(dict.fromkeys(AUTO_REFS, AUTO))
    data["scheduler"] = {"configMap": AUTO, "deployment": AUTO}
    data["ascendVnpu"] = {**data.get("ascendVnpu", {}), "schedulerDevice": AUTO}
    return OperatorConfig.model_validate(data)


def dump(data: Any, output: str) -> str:
    """`data` as `-o json` or `-o yaml` prints it."""
    if output == "yaml":
        import yaml

        return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def rule_list() -> list[dict[str, str]]:
    """Every registered rule: its id, what it checks (title) and, where its function says
    more, that too."""
    from vgpu_operator.core.rules import RULES

    out = []
    for r in RULES.values():
        doc = (r.check.__doc__ or "").strip().split("\n\n", 1)[0]
        out.append({"id": r.id, "checks": r.title, "details": " ".join(doc.split())})
    return out


def format_rule_list(rules: list[dict[str, str]]) -> str:
    width = max(len(r["id"]) for r in rules)
    lines = []
    for r in rules:
        lines.append(f"{r['id']:<{width}}  {r['checks']}")
        if r["details"]:
            lines += textwrap.wrap(
                r["details"],
                100,
                initial_indent=" " * (width + 4),
                subsequent_indent=" " * (width + 4),
                break_on_hyphens=False,
                break_long_words=False,
            )
    return "\n".join(lines) + "\n"


def format_discovery(discovery: Any) -> str:
    from vgpu_operator.core.volcano.discovery import describe

    lines = ["Resolved from the cluster ('auto'):"]
    lines += [f"  {line}" for line in describe(discovery)]
    lines += [f"  note: {p}" for p in discovery.problems]
    return "\n".join(lines) + "\n\n"


def discovery_json(discovery: Any) -> dict[str, Any]:
    return {
        "resolved": [
            {"field": r.field, "value": r.value, "why": r.why} for r in discovery.resolved
        ],
        "problems": list(discovery.problems),
    }


def cmd_doctor(args: argparse.Namespace) -> int:
    from vgpu_operator.core.report import exit_code, format_json, format_table, to_json_data
    from vgpu_operator.core.rules import RULES

    if args.list_rules and args.save_snapshot:
        print(
            "vgpu-operator doctor: --list-rules reads no cluster: nothing to save", file=sys.stderr
        )
        return EXIT_USAGE
    if args.list_rules:
        rules = rule_list()
        print(
            dump(rules, args.output) if args.output != "table" else format_rule_list(rules),
            end="",
        )
        return 0
    try:
        config = _load(args.config)
    except OSError as exc:
        print(f"vgpu-operator doctor: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except ConfigError as exc:
        print(f"vgpu-operator doctor: invalid configuration {args.config}:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    unknown = sorted(set(args.rule or ()) - set(RULES))
    if unknown:
        print(
            f"vgpu-operator doctor: unknown rule(s) {', '.join(unknown)}; known: "
            + ", ".join(RULES),
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.save_snapshot and not Path(args.save_snapshot).resolve().parent.is_dir():
        print(
            f"vgpu-operator doctor: cannot write snapshot {args.save_snapshot}: its directory "
            "does not exist",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    try:
        discovery, results = asyncio.run(
            check(
                args.kubeconfig,
                args.context,
                config,
                args.rule,
                args.save_snapshot,
                discover=args.discover,
            )
        )
    except (SnapshotFileError, ConfigLookupError) as exc:
        print(f"vgpu-operator doctor: {exc}", file=sys.stderr)
        return exc.code
    except ConfigError as exc:
        print(
            f"vgpu-operator doctor: what was discovered is not a valid configuration:\n{exc}",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    except (CredentialsError, kubeapi.Unreachable, OSError) as exc:
        print(f"vgpu-operator doctor: cannot reach the cluster: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except kubeapi.ApiError as exc:
        print(
            f"vgpu-operator doctor: the apiserver refused a read ({exc}); the credentials need "
            "get/list on configmaps, deployments, daemonsets, nodes and pods"
            + (" (and vgpunodepolicies, for --save-snapshot)" if args.save_snapshot else ""),
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    if args.output == "json" and not (discovery.resolved or discovery.problems):
        print(format_json(results), end="")
    elif args.output != "table":
        data = to_json_data(results)
        if discovery.resolved or discovery.problems:
            data = {"discovery": discovery_json(discovery), **data}
        print(dump(data, args.output), end="")
    else:
        if discovery.resolved or discovery.problems:
            print(format_discovery(discovery), end="")
        print(format_table(results), end="")
    return exit_code(results)


async def check(
    kubeconfig: str | None,
    context: str | None,
    config: OperatorConfig | None,
    only: list[str] | None,
    save_to: str | None = None,
    *,
    discover: bool = False,
) -> Any:
    """(discovery, rule results) of the cluster, checked against `config` (None: the running
    operator's, read from the cluster and said on stderr; ConfigLookupError when it cannot be
    used); `discover`: every name resolved from the cluster. With `save_to`, what was read is
    saved there first (raises SnapshotFileError when it cannot be)."""
    from vgpu_operator.controller.admission_guard import read_admission
    from vgpu_operator.controller.discovery import read_and_discover
    from vgpu_operator.controller.rules_worker import run_rules, shared
    from vgpu_operator.controller.snapshot import read_snapshot
    from vgpu_operator.kubeapi.credentials import resolve

    api = await resolve(kubeconfig, context).client(pool_size=8, user_agent="vgpu-operator-doctor")
    shared().start()  # the rules' worker imports them while the cluster is read
    async with api:
        if config is None:
            source = await running_config(api)
            announce("doctor", source)
            config = source.config
        if discover:
            config = all_auto(config)
        discovery = await read_and_discover(api, config)  # reads nothing without an `auto`
        if save_to is None:
            snapshot = await read_snapshot(api, discovery.config)
            snapshot = replace(snapshot, policies=await read_policies(api))
        else:  # what `plan` reads: the same snapshot, and the policies
            read = await read_cluster(api, discovery.config, missing_crd_is_empty=True)
            snapshot = replace(read.snapshot, policies=list(read.policies))
            save_snapshot(save_to, read)  # before the rules run: a rule's failure loses nothing
        # the chart's admission policies, when the configuration names them (read only here)
        snapshot = replace(snapshot, admission=await read_admission(api, discovery.config))
    # In a worker process killed at a deadline, as the controller runs them: a rule that
    # stalls on what a ConfigMap holds is reported, and doctor still completes.
    return discovery, await run_rules(snapshot, only=only)


async def read_policies(api: Any) -> list[dict[str, Any]]:
    """Every VGPUNodePolicy, for the policy-keys rule; none where the cluster has no CRD or the
    credentials may not list them (that rule then checks nothing)."""
    try:
        listing = await kubeapi.request(api, "GET", kubeapi.policy_path())
    except (kubeapi.NotFound, kubeapi.Forbidden):
        return []
    return [dict(p) for p in listing.get("items") or [] if isinstance(p, Mapping)]


def save_snapshot(path: str, read: ClusterRead) -> None:
    """Write `read` to `path` and say so on stderr (stdout is the report's)."""
    try:
        save(path, read)
    except OSError as exc:
        raise SnapshotFileError(
            f"cannot write snapshot {path}: {exc.strerror or exc}", EXIT_CANNOT_RUN
        ) from None
    for note in read.notes:
        print(f"vgpu-operator doctor: note: {note}", file=sys.stderr)
    s = read.snapshot
    print(
        f"vgpu-operator doctor: saved the snapshot to {path} ({len(s.nodes)} nodes, "
        f"{len(s.pods)} pods, {len(read.policies)} policies); plan over it with "
        f"`vgpu-operator plan --snapshot {path} -f POLICY_FILE`",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m vgpu_operator.commands.doctor ...`: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="vgpu-operator")
    add_subcommand(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["doctor", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
