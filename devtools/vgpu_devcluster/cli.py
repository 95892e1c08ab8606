"""`vgpu-dev`: the local-cluster tools' own command line (the checkout's, never the image's).

  vgpu-dev demo [--once]                 the operator on a local apiserver with simulated GPUs
  vgpu-dev cluster up|down|status|build  a local control plane (etcd, apiserver, kwok) by hand

The shipped `vgpu-operator` command knows nothing of these: its wheel leaves devtools/ out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from vgpu_devcluster import binaries


def _state_file() -> Path:
    return binaries.cache_root() / "dev-cluster.json"


def cmd_cluster(args: argparse.Namespace) -> int:
    from vgpu_devcluster.cluster import LocalCluster, stop_pids

    state = _state_file()
    if args.action == "build":
        binaries.ensure_all()
        return 0
    if args.action == "up":
        if state.exists():
            print(f"a dev cluster is already up (see {state}); run 'vgpu-dev cluster down' first")
            return 1
        cluster = LocalCluster.start(detach=True)
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(
            json.dumps(
                {"workdir": str(cluster.workdir), "pids": cluster.pids, "server": cluster.server}
            )
        )
        print(cluster.kubeconfig)
        return 0
    if args.action == "down":
        if not state.exists():
            print("no dev cluster is up")
            return 0
        info = json.loads(state.read_text())
        stop_pids({k: int(v) for k, v in info["pids"].items()})
        shutil.rmtree(info["workdir"], ignore_errors=True)
        state.unlink()
        print("dev cluster stopped")
        return 0
    # status
    if not state.exists():
        print("no dev cluster is up")
        return 1
    info = json.loads(state.read_text())
    print(f"server: {info['server']}\nkubeconfig: {info['workdir']}/kubeconfig-admin")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from vgpu_devcluster.demo import run_demo

    return asyncio.run(run_demo(once=args.once))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgpu-dev", description="vgpu-operator's local-cluster tools (a checkout's only)."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="the operator on a local apiserver with simulated GPUs")
    demo.add_argument("--once", action="store_true", help="print the result and stop")
    demo.set_defaults(func=cmd_demo)
    cluster = sub.add_parser("cluster", help="a local control plane (etcd, apiserver, kwok)")
    cluster.add_argument("action", choices=["up", "down", "status", "build"])
    cluster.set_defaults(func=cmd_cluster)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    # SIGTERM behaves like Ctrl-C, so the demo tears down what it started; and Ctrl-C is
    # Ctrl-C even where the demo was started from a shell that ignores SIGINT for what it runs
    # in the background (a non-interactive shell's `&`, and so whatever that started).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
