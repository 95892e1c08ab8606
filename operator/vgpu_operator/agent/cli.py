"""`vgpu-operator agent`: the node agent (one per GPU node, a DaemonSet in the chart).

    vgpu-operator agent [--node N] [--kubeconfig F] [--context C] [--nvidia-smi PATH]
                        [--timeout S] [--resync S] [--retry S] [--liveness URL] [--once]
                        [--metrics-port P] [--log-format text|json]
                        [--pod-resources-socket PATH] [--pod-resources-timeout S]

`--node` defaults to $NODE_NAME (the downward API in the DaemonSet), `--nvidia-smi` to
$VGPU_NVIDIA_SMI or `nvidia-smi` on PATH, credentials to the kubeconfig, $KUBECONFIG or the
in-cluster ServiceAccount (the agent's own client, kubeapi.lite: a kubeconfig's token, tokenFile
or client certificate; no exec plugin). `--metrics-port` serves Prometheus metrics
(agent.metrics) at /metrics on all addresses. Before anything is destroyed or reset, the
kubelet's PodResources API on `--pod-resources-socket` (default
/var/lib/kubelet/pod-resources/kubelet.sock; empty: not asked, compute processes only) says
which pods hold the GPU (agent.kubelet). `--once` acts once, reports, and exits 0 on `success`
(1 otherwise).
SIGTERM/SIGINT: finish the action under way, then exit 0; a second signal cancels it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from vgpu_operator import logs
from vgpu_operator.agent.podresources_wire import DEFAULT_SOCKET
from vgpu_operator.agent.podresources_wire import DEFAULT_TIMEOUT as DEFAULT_PR_TIMEOUT
from vgpu_operator.agent.smi import DEFAULT_BINARY, DEFAULT_TIMEOUT, ENV_BINARY

ENV_NODE = "NODE_NAME"


def add_subcommand(sub: Any) -> None:
    """Register `agent` on the CLI's subparsers (vgpu_operator.commands.cli)."""
    agent = sub.add_parser("agent", help="the node agent: apply the node's MIG configuration")
    agent.add_argument("--node", default=os.environ.get(ENV_NODE), help="default: $NODE_NAME")
    agent.add_argument("--kubeconfig", help="default: $KUBECONFIG, in-cluster, then ~/.kube/config")
    agent.add_argument("--context", help="the kubeconfig context (default: its current one)")
    agent.add_argument(
        "--nvidia-smi",
        dest="nvidia_smi",
        default=os.environ.get(ENV_BINARY) or DEFAULT_BINARY,
        help=f"the nvidia-smi binary (default: ${ENV_BINARY} or {DEFAULT_BINARY})",
    )
    agent.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per nvidia-smi call"
    )
    agent.add_argument(
        "--resync", type=float, default=300.0, help="seconds between re-checks of the GPUs"
    )
    agent.add_argument(
        "--retry", type=float, default=30.0, help="seconds until a failed/blocked node retries"
    )
    agent.add_argument(
        "--liveness",
        help="liveness endpoint, e.g. http://0.0.0.0:8081/healthz (fails while the apiserver "
        "has refused the agent's credentials for longer than --auth-bound)",
    )
    agent.add_argument(
        "--auth-bound",
        type=float,
        default=300.0,
        help="seconds of refused credentials (401/403) before the liveness check fails",
    )
    agent.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve Prometheus metrics (nvidia-smi calls, MIG applies) on this port; 0: none",
    )
    agent.add_argument(
        "--pod-resources-socket",
        dest="pod_resources_socket",
        default=DEFAULT_SOCKET,
        help="the kubelet's PodResources socket, asked which pods hold a GPU before anything "
        f"is destroyed or reset (default {DEFAULT_SOCKET}; empty: not asked, compute "
        "processes only)",
    )
    agent.add_argument(
        "--pod-resources-timeout",
        dest="pod_resources_timeout",
        type=float,
        default=DEFAULT_PR_TIMEOUT,
        help="seconds for the kubelet's PodResources List",
    )
    agent.add_argument("--once", action="store_true", help="act once, report and exit")
    agent.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    logs.add_log_format(agent)
    agent.set_defaults(func=cmd_agent)


def cmd_agent(args: argparse.Namespace) -> int:
    if not args.node:
        print(f"vgpu-operator agent: no node name (--node or ${ENV_NODE})", file=sys.stderr)
        return 2
    from vgpu_operator.kubeapi.lite import load
    from vgpu_operator.kubeapi.source import CredentialsError, resolve

    try:  # loaded once now: a missing or broken kubeconfig is one line and exit code 3
        load(resolve(args.kubeconfig, args.context))
    except CredentialsError as exc:
        print(f"vgpu-operator agent: cannot reach the cluster: {exc}", file=sys.stderr)
        return 3
    from vgpu_operator import logs

    logs.setup(
        args.log_format,
        level=logging.DEBUG if args.verbose else logging.INFO,
        text_format=f"%(asctime)s %(levelname)s agent[{args.node}] %(message)s",
        fields={"node": args.node},
    )
    return asyncio.run(run_agent(args))


async def run_agent(args: argparse.Namespace) -> int:
    from vgpu_operator import endpoints, health
    from vgpu_operator.agent.kubelet import PodResourcesGuard
    from vgpu_operator.agent.loop import Agent, AgentOptions
    from vgpu_operator.agent.nodeapi import KubeNodeApi, agent_client
    from vgpu_operator.agent.smi import NvidiaSmi
    from vgpu_operator.kubeapi.lite import load
    from vgpu_operator.kubeapi.source import resolve

    settings = load(resolve(args.kubeconfig, args.context))
    guard = None
    if args.pod_resources_socket:
        guard = PodResourcesGuard(args.pod_resources_socket, args.pod_resources_timeout)
    options = AgentOptions(resync=args.resync, retry=args.retry, guard=guard)
    driver = NvidiaSmi(args.nvidia_smi, timeout=args.timeout)
    api = agent_client(settings, args.node, auth_bound=args.auth_bound)
    servers: list[endpoints.Server] = []
    if args.metrics_port and not args.once:
        from vgpu_operator.agent import metrics

        servers.append(await endpoints.serve("0.0.0.0", args.metrics_port, metrics.ROUTES))
    if args.liveness and not args.once:
        servers.append(await health.serve(args.liveness, {"credentials": api.auth.problem}))
    async with api:
        agent = Agent(KubeNodeApi(api, args.node), driver, options)
        if args.once:
            outcome = await agent.act("start")
            return 0 if outcome is not None and outcome.state == "success" else 1
        main = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if agent.stopping and main is not None:
                main.cancel()  # a second signal: do not wait for the action under way
            agent.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            await agent.run()
        except asyncio.CancelledError:
            logging.getLogger("vgpu_operator.agent").warning("stopped during an action")
            return 1
        finally:
            for server in servers:
                await server.cleanup()
        return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m vgpu_operator.agent.cli ...` runs the agent without the other subcommands."""
    parser = argparse.ArgumentParser(prog="vgpu-operator")
    add_subcommand(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["agent", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
