"""`vgpu-operator doctor`: run every consistency rule against a cluster and say what is wrong.

Read-only (GETs and LISTs only) and independent of the operator: it needs a kubeconfig that may
read ConfigMaps, Deployments, DaemonSets, Nodes and Pods, and nothing of the operator installed.
The operator configuration (resource names, where each component lives) is the built-in default
unless `--config` names the file the operator runs with. Exit code: 0 when nothing is wrong
(notes only), 1 when a rule found an error or a warning, 2 when the check could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.kubeapi.credentials import CredentialsError
from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config

EXIT_CANNOT_RUN = 2


def add_subcommand(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "doctor",
        help="check the Volcano/HAMi vGPU configuration of a cluster (read-only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config or in-cluster")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument(
        "--config", metavar="FILE", help="operator configuration file (default: built-in)"
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--rule",
        action="append",
        metavar="ID",
        help="run only this rule (repeatable); default: every rule",
    )
    parser.set_defaults(func=cmd_doctor)


def _load(path: str | None) -> OperatorConfig:
    return load_config(Path(path).read_text()) if path else OperatorConfig()


def cmd_doctor(args: argparse.Namespace) -> int:
    from vgpu_operator.core.report import exit_code, format_json, format_table
    from vgpu_operator.core.rules import RULES

    try:
        config = _load(args.config)
    except (OSError, ConfigError) as exc:
        print(f"vgpu-operator doctor: invalid configuration {args.config}:\n{exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    unknown = sorted(set(args.rule or ()) - set(RULES))
    if unknown:
        print(
            f"vgpu-operator doctor: unknown rule(s) {', '.join(unknown)}; known: "
            + ", ".join(RULES),
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    try:
        results = asyncio.run(_check(args.kubeconfig, args.context, config, args.rule))
    except (CredentialsError, kubeapi.Unreachable, OSError) as exc:
        print(f"vgpu-operator doctor: cannot reach the cluster: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except kubeapi.ApiError as exc:
        print(
            f"vgpu-operator doctor: the apiserver refused a read ({exc}); the credentials need "
            "get/list on configmaps, deployments, daemonsets, nodes and pods",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    print(format_json(results) if args.output == "json" else format_table(results), end="")
    return exit_code(results)


async def _check(
    kubeconfig: str | None, context: str | None, config: OperatorConfig, only: list[str] | None
) -> Any:
    from vgpu_operator.controller.rules_worker import run_rules
    from vgpu_operator.controller.snapshot import read_snapshot
    from vgpu_operator.kubeapi.credentials import resolve

    api = await resolve(kubeconfig, context).client(pool_size=8, user_agent="vgpu-operator-doctor")
    async with api:
        snapshot = await read_snapshot(api, config)
    # In a worker process killed at a deadline, as the controller runs them: a rule that
    # stalls on what a ConfigMap holds is reported, and doctor still completes.
    return await run_rules(snapshot, only=only)


def main(argv: list[str] | None = None) -> int:
    """`python -m vgpu_operator.doctor ...`: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="vgpu-operator")
    add_subcommand(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["doctor", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
