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
from typing import Any

from vgpu_operator import __version__, logs
from vgpu_operator.commands import exitcodes

Command = Callable[[argparse.Namespace], int]


def cmd_crds(args: argparse.Namespace) -> int:
    from vgpu_operator import crdgen

    if args.output_dir:
        crdgen.write_crds(Path(args.output_dir))
    elif args.output == "json":
        import json

        import yaml

        docs = [d for d in yaml.safe_load_all(crdgen.render_crds()) if d]
        sys.stdout.write(json.dumps(docs if len(docs) != 1 else docs[0], indent=2) + "\n")
    else:
        sys.stdout.write(crdgen.render_crds())
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from vgpu_operator import logs
    from vgpu_operator.controller.app import Settings
    from vgpu_operator.controller.leader import LeaderElectionConfig, default_identity
    from vgpu_operator.controller.reconciler import ReconcilerOptions
    from vgpu_operator.controller.runner import run_operator
    from vgpu_operator.controller.runtime import Runtime
    from vgpu_operator.kubeapi.credentials import CredentialsError, resolve
    from vgpu_operator.models.config import OperatorConfig, load_config
    from vgpu_operator.models.config_errors import ConfigError

    try:
        config = load_config(Path(args.config).read_text()) if args.config else OperatorConfig()
    except ConfigError as exc:
        print(f"vgpu-operator run: invalid configuration {args.config}:\n{exc}", file=sys.stderr)
        return exitcodes.USAGE
    except OSError as exc:
        print(f"vgpu-operator run: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return exitcodes.CANNOT
    try:
        credentials = resolve(args.kubeconfig, args.context)
        # Loaded once now (files read, exec plugins run): a missing or broken kubeconfig stops
        # the command here with one line, not in Kopf's startup handler, which retries forever.
        asyncio.run(credentials.configuration())
    except CredentialsError as exc:
        print(f"vgpu-operator run: cannot reach the cluster: {exc}", file=sys.stderr)
        return exitcodes.CANNOT
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
    "vgpu_operator.commands.validate",
)
# `plan`: what the operator would do for a policy, read-only (vgpu_operator/commands/plan.py).
PLAN_MODULE = "vgpu_operator.commands.plan"
# Subcommands run alone: `vgpu-operator agent` runs on every GPU node for as long as the node
# lives, so its parser holds its own subcommand only. The other subcommands' modules import the
# controller's core and models (rules, rendering, ruamel), about 6 MiB of each agent's resident
# memory that it never uses (bench/agent_cost.py). Its arguments, help and errors are the same.
# `doctor` too: a user waits for its start, and the other commands' modules are a tenth of a
# second of imports it does not use (bench/doctor_scale.py).
ALONE: dict[str, str] = {
    "agent": "vgpu_operator.agent.cli",
    "doctor": "vgpu_operator.commands.doctor",
}
# `vgpu-operator run` (the controller) is built alone too: the doctor, plan, validate and
# cleanup modules it would otherwise import are about 2 MiB of the controller's resident memory
# (bench/process_floor.py), and it uses none of them.


def add_run(sub: Any) -> None:
    """`vgpu-operator run`: the controller's command line."""
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
    run.add_argument(
        "--leader-elect-lease-duration",
        type=float,
        default=15.0,
        metavar="S",
        help="a standby takes over this long after the last renewal it saw (%(default)s)",
    )
    run.add_argument(
        "--leader-elect-renew-deadline",
        type=float,
        default=10.0,
        metavar="S",
        help="the leader gives up when it cannot renew within this (%(default)s)",
    )
    run.add_argument(
        "--leader-elect-retry-period",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between attempts to acquire or renew (%(default)s)",
    )
    run.add_argument(
        "--identity", help="this replica's name in the Lease and user agent (default: host)"
    )
    logs.add_log_format(run)
    run.set_defaults(func=cmd_run)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only` (`run` or a key of ALONE), that subcommand alone."""
    parser = argparse.ArgumentParser(
        prog="vgpu-operator",
        description="Declarative, consistency-checked GPU virtualization for Volcano.",
    )
    parser.add_argument("--version", action="version", version=f"vgpu-operator {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if only is not None:
        if only == "run":
            add_run(sub)
        else:
            importlib.import_module(ALONE[only]).add_subcommand(sub)
        with_exit_codes(parser)
        return parser
    add_run(sub)

    crds = sub.add_parser("crds", help="print (or write) the CRDs generated from the models")
    crds.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="the format printed",
    )
    crds.add_argument("--output-dir", metavar="DIR", help="write one YAML file per CRD here")
    crds.set_defaults(func=cmd_crds)
    for module in (*SUBCOMMAND_MODULES, PLAN_MODULE):
        importlib.import_module(module).add_subcommand(sub)
    with_exit_codes(parser)
    return parser


def with_exit_codes(parser: argparse.ArgumentParser) -> None:
    """The exit-code table as the epilog of `parser` and of each of its subcommands."""
    parser.epilog = exitcodes.EPILOG
    parser.formatter_class = _raw_epilog(parser.formatter_class)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                with_exit_codes(child)


def _raw_epilog(base: Any) -> Any:
    """`base` (a HelpFormatter class), but the epilog printed as written (the table's
    columns)."""
    if issubclass(base, argparse.RawDescriptionHelpFormatter):
        return base

    class Formatter(base):  # type: ignore[misc]
        def add_text(self, text: str | None) -> None:
            if text is exitcodes.EPILOG:
                self._add_item(lambda t: t, [text])
            else:
                super().add_text(text)

    return Formatter


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words and words[0] in (*ALONE, "run") else None)
    args = parser.parse_args(words)
    func: Command | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return exitcodes.USAGE
    # SIGTERM behaves like Ctrl-C, so every command tears down what it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a user error no command caught: one line, the table's code
        return exitcodes.user_error(f"vgpu-operator {args.command}", exc)


if __name__ == "__main__":
    sys.exit(main())
