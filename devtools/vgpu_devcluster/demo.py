"""`vgpu-operator demo`: the operator on a real local apiserver with simulated GPU nodes.

Starts the control plane, creates GPU nodes of several models and one CPU node, installs the
CRDs and the chart's RBAC, runs the operator under its ServiceAccount and one node agent per GPU
node (a subprocess under the agent's ServiceAccount, with a fake nvidia-smi of the node's model),
applies the example policies and prints the nodes as the operator and the agents left them; then
keeps printing changes so a person can edit a policy (`kubectl edit vnp ...`) and watch the nodes
follow. Ctrl-C tears it all down, agents included.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import config

from vgpu_devcluster import binaries
from vgpu_devcluster.agentproc import (
    AgentProcess,
    FakeGpus,
    fake_model,
    stop_all,
)
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import apply, install_agent_access, install_operator_access
from vgpu_devcluster.nodes import NodeSpec, create_gpu_nodes
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.runner import OperatorThread

DEMO_NODES: tuple[NodeSpec, ...] = (
    *(NodeSpec(f"rtx4090-{i}", "RTX-4090", 4) for i in range(3)),
    *(NodeSpec(f"a100-{i}", "A100-SXM4-80GB", 8) for i in range(2)),
    NodeSpec("h100-0", "H100-80GB-HBM3", 8),
    NodeSpec("cpu-0"),
)

Out = Callable[[str], None]


def examples_dir() -> Path:
    return binaries.repo_root() / "examples"


def load_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _operator_labels(obj: dict[str, Any]) -> list[str]:
    meta = obj["metadata"]
    owned = json.loads((meta.get("annotations") or {}).get(contract.ANN_OWNED) or "{}")
    return [f"{k}={v}" for k, v in sorted((owned.get("labels") or {}).items())]


def node_table(nodes: list[dict[str, Any]]) -> str:
    rows = [("NODE", "GPU", "POLICY", "MODE", "LABELS SET", "TAINTS", "CONFIG", "STATE")]
    for obj in sorted(nodes, key=lambda o: o["metadata"]["name"]):
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        ann = meta.get("annotations") or {}
        taints = [
            f"{t['key']}={t.get('value', '')}:{t['effect']}"
            for t in (obj.get("spec") or {}).get("taints") or []
        ]
        released = json.loads(ann.get(contract.ANN_CONFIG) or "{}")
        mig = released.get("mig") or {}
        cfg = released.get("mode", "-")
        if mig:
            cfg += f"/{mig.get('partitioning')}"
        rows.append(
            (
                meta["name"],
                labels.get(contract.GFD_PRODUCT, "-").removeprefix("NVIDIA-"),
                labels.get(contract.LABEL_POLICY, "-"),
                labels.get(contract.LABEL_MODE, "-"),
                ",".join(_operator_labels(obj)) or "-",
                ",".join(taints) or "-",
                cfg,
                labels.get(contract.LABEL_STATE, "-"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


async def _nodes(api: Any) -> list[dict[str, Any]]:
    listing = await kubeapi.request(api, "GET", kubeapi.node_path())
    return list(listing.get("items", []))


async def run_demo(*, once: bool = False, out: Out = print, timeout: float = 150.0) -> int:
    out("==> starting a local control plane (etcd, kube-apiserver, controller manager, ...)")
    with LocalCluster.run(prefix="vgpu-demo-") as cluster:
        api = await config.new_client_from_config(config_file=str(cluster.kubeconfig))
        async with api:
            out("==> installing CRDs and the chart's RBAC; creating simulated GPU nodes")
            credentials = await install_operator_access(api, cluster.workdir)
            agent_credentials = await install_agent_access(api, cluster.workdir)
            assert agent_credentials.kubeconfig is not None
            kubeconfig = Path(agent_credentials.kubeconfig)
            await create_gpu_nodes(api, DEMO_NODES)
            out("==> starting the operator (as ServiceAccount vgpu-system/vgpu-operator)")
            operator = OperatorThread(credentials).start()
            agents: list[AgentProcess] = []
            try:
                out("==> starting one node agent per GPU node (fake nvidia-smi of its model)")
                start_agents(cluster.workdir / "agents", kubeconfig, agents)
                policies = load_documents(sorted((examples_dir() / "demo").glob("*.yaml")))
                for doc in policies:
                    await apply(api, doc)
                    out(f"    applied VGPUNodePolicy {doc['metadata']['name']}")
                await _wait_converged(api, len(DEMO_NODES) - 1, timeout, agents)
                table = node_table(await _nodes(api))
                out(table)
                if once:
                    return 0
                kubectl = binaries.tool_dir(binaries.TOOL_BY_NAME["kubectl"]) / "kubectl"
                out(
                    f"\nThe demo keeps running. In another shell:\n"
                    f"  export KUBECONFIG={cluster.kubeconfig}\n"
                    f"  {kubectl} get vnp\n"
                    f"  {kubectl} edit vnp rtx4090-hami-core   # the nodes follow\n"
                    f"  {kubectl} edit vnp h100-static-mig     # the agent re-partitions the GPUs\n"
                    f"Agent logs: {cluster.workdir / 'agents'}/<node>/agent.log\n"
                    f"Ctrl-C stops it and removes everything.\n"
                )
                while True:
                    await asyncio.sleep(2)
                    now = node_table(await _nodes(api))
                    if now != table:
                        table = now
                        out(f"--- {time.strftime('%H:%M:%S')} nodes changed:\n{table}")
            finally:
                stop_all(agents)
                operator.stop()


def start_agents(directory: Path, kubeconfig: Path, agents: list[AgentProcess]) -> None:
    """One agent subprocess per GPU node of the demo, each with its own simulated GPUs; each is
    added to `agents` as soon as it runs (the caller stops them, also after a failure here)."""
    for spec in DEMO_NODES:
        if spec.model is None:
            continue
        home = directory / spec.name
        gpus = FakeGpus.create(home, spec.name, fake_model(spec.model), spec.gpus)
        agent = AgentProcess(spec.name, kubeconfig, gpus, home / "agent.log", resync=60.0)
        agents.append(agent.start())


async def _wait_converged(
    api: Any, expected: int, timeout: float, agents: list[AgentProcess]
) -> None:
    """Until the operator configured `expected` nodes and every agent reports a final state."""
    deadline = time.monotonic() + timeout
    final = {"success", "failed", "blocked"}
    while True:
        nodes = await _nodes(api)
        labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
        managed = [n for n, lab in labels.items() if contract.LABEL_POLICY in lab]
        waiting = [
            a.node for a in agents if labels.get(a.node, {}).get(contract.LABEL_STATE) not in final
        ]
        if len(managed) >= expected and not waiting:
            return
        dead = [a.node for a in agents if not a.running()]
        if dead:
            raise RuntimeError(f"node agents exited: {dead}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"only {len(managed)} of {expected} nodes configured; agents not done: {waiting}"
            )
        await asyncio.sleep(0.5)
