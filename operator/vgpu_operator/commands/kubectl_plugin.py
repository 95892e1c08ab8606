"""`kubectl vgpu`: the operator's view of a cluster as a kubectl plugin (`kubectl-vgpu` on PATH).

    kubectl vgpu                 # pools and nodes at a glance (same as `kubectl vgpu get`)
    kubectl vgpu get [pools|nodes]
    kubectl vgpu doctor [...]    # = vgpu-operator doctor
    kubectl vgpu plan [...]      # = vgpu-operator plan

Pools: each VGPUNodePolicy's mode, matched and ready nodes, and its Ready and ConfigConsistent
conditions. Nodes: every node a policy manages or that shows GPUs, with its policy, mode, the
agent's state, the released configuration and what HAMi's device plugin registered there (GPUs
and mode from `volcano.sh/node-vgpu-register`, while the node has vGPU allocatable). Read-only.
kubectl hands a plugin only the arguments after its name and the environment: the credentials
come from `$KUBECONFIG` (or `--kubeconfig` / `--context` after the subcommand), as kubectl's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.commands import exitcodes
from vgpu_operator.kubeapi.credentials import CredentialsError, add_connection_arguments
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register

Row = tuple[str, ...]
POOL_COLUMNS: Row = ("POLICY", "MODE", "MATCHED", "READY", "READY-COND", "CONSISTENT")
NODE_COLUMNS: Row = ("NODE", "GPU", "POLICY", "MODE", "CONFIG", "STATE", "REGISTERED")
VGPU_COUNT = "volcano.sh/vgpu-number"  # HAMi's default count resource (reference: the manifest)


def _condition(obj: Mapping[str, Any], kind: str) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status", "Unknown"))
    return "-"


def pool_rows(policies: Sequence[Mapping[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    for p in sorted(policies, key=lambda o: str(o["metadata"]["name"])):
        status = p.get("status") or {}
        rows.append(
            (
                str(p["metadata"]["name"]),
                str((p.get("spec") or {}).get("mode", "-")),
                str(status.get("matchedNodes", 0)),
                str(status.get("readyNodes", 0)),
                _condition(p, "Ready"),
                _condition(p, "ConfigConsistent"),
            )
        )
    return rows


def registered(node: Mapping[str, Any], count_resource: str = VGPU_COUNT) -> str:
    """What HAMi's plugin registered on the node, `<GPUs>x<mode>/<count> vGPU`, or `-` when it
    registers nothing now (no register annotation, or no allocatable: its pod is gone)."""
    meta = node.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(REGISTER_ANNOTATION)
    allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(count_resource, "0")
    if not raw or str(allocatable) in ("", "0"):
        return "-"
    try:
        gpus = parse_register(raw)
    except ValueError:
        return "unreadable"
    modes = ",".join(sorted({str(g.mode) for g in gpus})) or "-"
    return f"{len(gpus)}x{modes}/{allocatable}"


def _released(annotations: Mapping[str, str]) -> str:
    try:
        released = json.loads(annotations.get(contract.ANN_CONFIG) or "{}")
    except ValueError:
        return "unreadable"
    if not isinstance(released, dict):
        return "unreadable"
    text = str(released.get("mode", "-"))
    mig = released.get("mig") or {}
    if isinstance(mig, dict) and mig.get("partitioning"):
        text += f"/{mig['partitioning']}"
    return text


def shows_gpus(node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    return (
        contract.LABEL_POLICY in labels
        or labels.get(contract.GFD_PRODUCT) is not None
        or any(k.startswith(("nvidia.com/", "huawei.com/")) for k in capacity)
    )


def node_rows(nodes: Sequence[Mapping[str, Any]], *, every: bool = False) -> list[Row]:
    """One row per node that a policy manages or that shows GPUs (`every`: all nodes)."""
    rows: list[Row] = []
    for n in sorted(nodes, key=lambda o: str(o["metadata"]["name"])):
        if not every and not shows_gpus(n):
            continue
        meta = n["metadata"]
        labels = meta.get("labels") or {}
        rows.append(
            (
                str(meta["name"]),
                str(labels.get(contract.GFD_PRODUCT, "-")).removeprefix("NVIDIA-"),
                str(labels.get(contract.LABEL_POLICY, "-")),
                str(labels.get(contract.LABEL_MODE, "-")),
                _released(meta.get("annotations") or {}),
                str(labels.get(contract.LABEL_STATE, "-")),
                registered(n),
            )
        )
    return rows


def table(columns: Row, rows: Sequence[Row]) -> str:
    all_rows = [columns, *rows]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(columns))]
    return (
        "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in all_rows
        )
        + "\n"
    )


async def _read(kubeconfig: str | None, context: str | None) -> tuple[list[Any], list[Any]]:
    from vgpu_operator.kubeapi.credentials import resolve

    api = await resolve(kubeconfig, context).client(pool_size=4, user_agent="kubectl-vgpu")
    async with api:
        policies, nodes = await asyncio.gather(
            kubeapi.request(api, "GET", kubeapi.policy_path()),
            kubeapi.request(api, "GET", kubeapi.node_path()),
        )
    return list(policies.get("items") or []), list(nodes.get("items") or [])


def cmd_get(args: argparse.Namespace) -> int:
    try:
        policies, nodes = asyncio.run(_read(args.kubeconfig, args.context))
    except (CredentialsError, kubeapi.Unreachable, OSError) as exc:
        print(f"kubectl vgpu: cannot reach the cluster: {exc}", file=sys.stderr)
        return exitcodes.CANNOT
    except kubeapi.ApiError as exc:
        print(
            f"kubectl vgpu: the apiserver refused a read ({exc}); the credentials need "
            "list on vgpunodepolicies and nodes",
            file=sys.stderr,
        )
        return exitcodes.CANNOT
    if args.output != "table":
        data: dict[str, Any] = {}
        if args.what in ("all", "pools"):
            data["pools"] = [
                dict(zip(POOL_COLUMNS, row, strict=True)) for row in pool_rows(policies)
            ]
        if args.what in ("all", "nodes"):
            data["nodes"] = [
                dict(zip(NODE_COLUMNS, row, strict=True))
                for row in node_rows(nodes, every=args.all_nodes)
            ]
        from vgpu_operator.commands.doctor import dump

        print(dump(data, args.output), end="")
        return exitcodes.OK
    parts = []
    if args.what in ("all", "pools"):
        parts.append(table(POOL_COLUMNS, pool_rows(policies)))
    if args.what in ("all", "nodes"):
        parts.append(table(NODE_COLUMNS, node_rows(nodes, every=args.all_nodes)))
    print("\n".join(parts), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl vgpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    get = sub.add_parser("get", help="pools and nodes at a glance")
    get.add_argument("what", nargs="?", choices=("all", "pools", "nodes"), default="all")
    add_connection_arguments(get)
    get.add_argument("-A", "--all-nodes", action="store_true", help="also nodes without GPUs")
    get.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="table, or the same rows as json or yaml",
    )
    get.set_defaults(func=cmd_get)
    from vgpu_operator.commands import doctor, plan

    doctor.add_subcommand(sub)
    plan.add_subcommand(sub)
    from vgpu_operator.commands.cli import with_exit_codes

    with_exit_codes(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if not args_in or (args_in[0].startswith("-") and args_in[0] not in ("-h", "--help")):
        args_in = ["get", *args_in]  # `kubectl vgpu [--kubeconfig F]`: the overview
    args = build_parser().parse_args(args_in)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a user error no command caught: one line, the table's code
        return exitcodes.user_error(f"kubectl vgpu {args.command}", exc)
    return code


if __name__ == "__main__":
    sys.exit(main())
