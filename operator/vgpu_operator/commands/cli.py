"""`vgpu-operator` command line: one console script, one subcommand per job.

The local demo and control plane are not here: they are the checkout's own tools (`vgpu-dev`,
devtools/vgpu_devcluster/cli.py), which the image's wheel leaves out."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from vgpu_operator import __version__

Command = Callable[[argparse.Namespace], int]


def cmd_crds(args: argparse.Namespace) -> int:
    from vgpu_operator import crdgen

    if args.output:
        crdgen.write_crds(Path(args.output))
    else:
        sys.stdout.write(crdgen.render_crds())
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from vgpu_operator import logs
    from vgpu_operator.controller.app import Settings
    from vgpu_operator.controller.handlers import Runtime
    from vgpu_operator.controller.leader import LeaderElectionConfig, default_identity
    from vgpu_operator.controller.reconciler import ReconcilerOptions
    from vgpu_operator.controller.runner import run_operator
    from vgpu_operator.kubeapi.credentials import CredentialsError, resolve
    from vgpu_operator.models.config import OperatorConfig, load_config
    from vgpu_operator.models.config_errors import ConfigError

    try:
        config = load_config(Path(args.config).read_text()) if args.config else OperatorConfig()
    except ConfigError as exc:
        print(f"vgpu-operator: invalid configuration {args.config}:\n{exc}", file=sys.stderr)
        return 2
    try:
        credentials = resolve(args.kubeconfig, args.context)
    except CredentialsError as exc:
        print(f"vgpu-operator: {exc}", file=sys.stderr)
        return 2
    identity = args.identity or default_identity()
    leader = None
    if args.leader_elect:
        leader = LeaderElectionConfig(
            namespace=args.leader_elect_namespace,
            name=args.leader_elect_name,
            identity=identity,
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
        )
    settings = Settings(
        credentials=credentials,
        options=ReconcilerOptions(
            concurrency=args.concurrency, resync_seconds=args.resync
        ).for_config(config),
        config=config,
        user_agent=f"vgpu-operator/{identity}",
    )
    logs.setup(args.log_format)
    logging.getLogger("kopf").setLevel(logging.WARNING)  # one line per handled event otherwise
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port)
    runtime = Runtime(settings, leader=leader, liveness=args.liveness)
    return asyncio.run(run_operator(runtime))


# Subcommands that live with their subsystem: each module has `add_subcommand(subparsers)`.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "vgpu_operator.agent.cli",
    "vgpu_operator.commands.doctor",
    "vgpu_operator.commands.cleanup",
)
# `plan`: what the operator would do for a policy, read-only (vgpu_operator/commands/plan.py).
PLAN_MODULE = "vgpu_operator.commands.plan"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgpu-operator",
        description="Declarative, consistency-checked GPU virtualization for Volcano.",
    )
    parser.add_argument("--version", action="version", version=f"vgpu-operator {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the controller")
    run.add_argument("--kubeconfig", help="default: $KUBECONFIG, in-cluster, then ~/.kube/config")
    run.add_argument("--context", help="kubeconfig context (default: its current one)")
    run.add_argument("--config", help="operator configuration file (YAML)")
    run.add_argument("--metrics-port", type=int, default=0, help="Prometheus metrics port")
    run.add_argument("--liveness", help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    run.add_argument("--concurrency", type=int, default=32, help="parallel node writes")
    run.add_argument("--resync", type=float, default=300.0, help="seconds between full passes")
    run.add_argument(
        "--leader-elect",
        action="store_true",
        help="write only while holding a coordination.k8s.io Lease (run several replicas)",
    )
    run.add_argument(
        "--leader-elect-namespace",
        default=os.environ.get("POD_NAMESPACE") or "vgpu-system",
        help="the Lease's namespace (default: $POD_NAMESPACE or vgpu-system)",
    )
    run.add_argument("--leader-elect-name", default="vgpu-operator", help="the Lease's name")
    run.add_argument("--leader-elect-lease-duration", type=float, default=15.0, metavar="S")
    run.add_argument("--leader-elect-renew-deadline", type=float, default=10.0, metavar="S")
    run.add_argument("--leader-elect-retry-period", type=float, default=2.0, metavar="S")
    run.add_argument(
        "--identity", help="this replica's name in the Lease and user agent (default: host)"
    )
    run.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or one JSON object per line (values escaped in both)",
    )
    run.set_defaults(func=cmd_run)

    crds = sub.add_parser("crds", help="print (or write) the CRDs generated from the models")
    crds.add_argument("-o", "--output", help="directory to write the CRD files into")
    crds.set_defaults(func=cmd_crds)
    for module in (*SUBCOMMAND_MODULES, PLAN_MODULE):
        importlib.import_module(module).add_subcommand(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Command | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    # SIGTERM behaves like Ctrl-C, so every command tears down what it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
