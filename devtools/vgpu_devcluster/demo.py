"""`vgpu-dev demo`: the operator on a real local apiserver with simulated GPU nodes, next to
what a real cluster has: Volcano's scheduler and HAMi's vGPU device plugin, installed from their
own release manifests, unmodified (`upstream.install`).

Starts the control plane, creates GPU nodes of several models and one CPU node, installs the
CRDs and the chart's RBAC, Volcano v1.15.1's scheduler and HAMi's volcano-vgpu-device-plugin
v1.12.0 (its DaemonSet's pods run on the kwok nodes; `pluginsim` plays the process inside each
one, registering the node's GPUs from the node-config the plugin mounts, as the real plugin
does at start), NVIDIA's DRA driver's DeviceClasses and kubelet plugin for the DRA pool
(`demo_dra`: the plugin's pods publish their node's ResourceSlice, and a claim workload runs
there), puts the demo's operator configuration
(`examples/demo/operator-config/config.yaml`: gpuMemoryFactor for 8 x 80 GB nodes) where the
chart keeps it (its ConfigMap vgpu-system/vgpu-operator-config, key config.yaml, as `helm
template` renders it), runs the operator under its ServiceAccount with what that ConfigMap
holds, read back as `doctor` and `plan` read it (so both need no `--config` here), and one
node agent per GPU node (a subprocess under the agent's ServiceAccount, with a fake nvidia-smi
of the node's model), applies the example policies and waits until the operator has rendered
the configuration, placed the plugin, restarted what must re-read it, and every rule is clean.
The controller and each agent serve their Prometheus metrics on a local port (as `run
--metrics-port` and `agent --metrics-port` do). Then it prints the pools and the nodes (with
what the plugin registered on each) and where to `curl` the metrics, and keeps printing
changes so a person can edit a policy or break something and watch it being put right.
Ctrl-C tears it all down, agents included.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import config as kubeconfig_loader
from prometheus_client import start_http_server

from vgpu_devcluster import binaries, demo_dra, upstream
from vgpu_devcluster.agentproc import (
    AgentProcess,
    FakeGpus,
    fake_model,
    stop_all,
)
from vgpu_devcluster.cluster import LocalCluster, free_port
from vgpu_devcluster.dra_kubelet import KubeletPluginSimulator
from vgpu_devcluster.install import (
    apply,
    install_agent_access,
    install_operator_access,
    install_operator_roles,
    render_chart,
)
from vgpu_devcluster.nodes import NodeSpec, create_gpu_nodes
from vgpu_devcluster.pluginsim import PluginSimulator
from vgpu_operator import contract, kubeapi
from vgpu_operator.commands.kubectl_plugin import POOL_COLUMNS, pool_rows, registered, table
from vgpu_operator.commands.running_config import running_config
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.snapshot import read_snapshot
from vgpu_operator.core.rules import run_rules
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.config_dra import DEFAULT_PLUGIN_NAMESPACE as DRA_NAMESPACE

DEMO_NODES: tuple[NodeSpec, ...] = (
    *(NodeSpec(f"rtx4090-{i}", "RTX-4090", 4) for i in range(3)),
    *(NodeSpec(f"a100-{i}", "A100-SXM4-80GB", 8) for i in range(2)),
    NodeSpec("h100-0", "H100-80GB-HBM3", 8),
    *demo_dra.DRA_NODES,
    NodeSpec("cpu-0"),
)

Out = Callable[[str], None]
# HAMi's vGPU device plugin as its manifest installs it
PLUGIN_NAMESPACE, PLUGIN_NAME = "kube-system", "volcano-device-plugin"


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


def node_table(nodes: list[dict[str, Any]], published: dict[str, int] | None = None) -> str:
    """One row per node; REGISTERED: what HAMi's plugin registered, or on a DRA node the
    devices the DRA driver publishes (`published`: node -> devices)."""
    rows = [
        ("NODE", "GPU", "POLICY", "MODE", "LABELS-SET", "TAINTS", "CONFIG", "REGISTERED", "STATE")
    ]
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
                demo_dra.published_column(meta["name"], published or {}) or registered(obj),
                labels.get(contract.LABEL_STATE, "-"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


async def _nodes(api: Any) -> list[dict[str, Any]]:
    listing = await kubeapi.request(api, "GET", kubeapi.node_path())
    return list(listing.get("items", []))


@dataclass
class Demo:
    """The demo's cluster, converged: what the caller may look at before it is torn down."""

    api: Any  # an admin kubernetes_asyncio ApiClient
    kubeconfig: Path  # admin
    workdir: Path
    config: OperatorConfig
    sim: PluginSimulator
    dra: KubeletPluginSimulator | None = None  # the DRA driver's kubelet plugin, once agents run
    agents: list[AgentProcess] = field(default_factory=list)
    controller_metrics: int = 0  # the port the controller's /metrics is served on

    def metrics_endpoints(self) -> list[tuple[str, str]]:
        """(who, URL) of every /metrics the demo serves: the controller's, then each agent's."""
        found = [("controller", f"http://127.0.0.1:{self.controller_metrics}/metrics")]
        found += [
            (f"agent on {a.node}", f"http://127.0.0.1:{a.metrics_port}/metrics")
            for a in self.agents
            if a.metrics_port
        ]
        return found


def config_file() -> Path:
    return examples_dir() / "demo" / "operator-config" / "config.yaml"


def operator_configmap(directory: Path) -> dict[str, Any]:
    """The chart's ConfigMap of the operator configuration (templates/configmap.yaml) with the
    demo's configuration as the values' `config:`, as `helm install -n vgpu-system` creates it:
    the same name, namespace, key and labels, so `doctor` and `plan` find it as on a chart
    install (commands/running_config.py). The values file is written to `directory`.

    The demo's node agents are processes, not pods: the chart's admission policy for the agent
    admits only tokens bound to a pod on the node, so the demo does not install it, and an
    operator that checks for every policy of the chart (`requireAdmissionPolicies`) would only
    observe. The values are those of a release without the chart's admission policies, the
    chart's explicit way out: admissionPolicies.enabled false, config.requireAdmissionPolicies
    false."""
    config = yaml.safe_load(config_file().read_text())
    values = directory / "demo-values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "admissionPolicies": {"enabled": False},
                "config": {**config, "requireAdmissionPolicies": False},
            }
        )
    )
    [configmap] = render_chart("configmap.yaml", values_files=(values,))
    return configmap


def policy_files() -> list[Path]:
    return sorted((examples_dir() / "demo").glob("*.yaml"))


@contextlib.asynccontextmanager
async def demo_cluster(*, out: Out = print, timeout: float = 240.0) -> AsyncIterator[Demo]:
    """Set the demo up, wait until it has converged, yield it; tear everything down after."""
    out("==> starting a local control plane (etcd, kube-apiserver, controller manager, ...)")
    with LocalCluster.run(prefix="vgpu-demo-") as cluster:
        api = await kubeconfig_loader.new_client_from_config(config_file=str(cluster.kubeconfig))
        async with api:
            out("==> installing CRDs and the chart's RBAC; creating simulated GPU nodes")
            credentials = await install_operator_access(api, cluster.workdir, demo_dra.CHART_VALUES)
            await install_operator_roles(api, demo_dra.CHART_VALUES, (DRA_NAMESPACE,))
            agent_credentials = await install_agent_access(api, cluster.workdir)
            assert agent_credentials.kubeconfig is not None
            await create_gpu_nodes(api, [s for s in DEMO_NODES if s not in demo_dra.DRA_NODES])
            out(
                "==> installing Volcano's scheduler and HAMi's vGPU device plugin from their own "
                f"manifests ({upstream.VOLCANO_FILE}, {upstream.hami_vgpu_file('v1.12.0').name})"
            )
            await upstream.install(api, hami="v1.12.0")
            sim = PluginSimulator(api, namespace=PLUGIN_NAMESPACE, name=PLUGIN_NAME).start()
            out(
                "==> installing NVIDIA's DRA driver as its chart does (DeviceClasses, kubelet "
                "plugin DaemonSet)"
            )
            await demo_dra.install_driver(api)
            await apply(api, operator_configmap(cluster.workdir))
            # read back as `doctor` and `plan` read it: what they check is what the operator runs
            source = await running_config(api)
            config = source.config
            out(
                "==> starting the operator (as ServiceAccount vgpu-system/vgpu-operator) with "
                f"{config_file().relative_to(binaries.repo_root())}, kept where the chart "
                f"keeps it: {source.where}"
            )
            operator = OperatorThread(credentials, config=config).start()
            # the in-process controller's registry, served as `run --metrics-port` serves it
            demo = Demo(api, cluster.kubeconfig, cluster.workdir, config, sim)
            demo.controller_metrics = free_port()
            metrics_server, metrics_thread = start_http_server(
                demo.controller_metrics, addr="127.0.0.1"
            )
            try:
                out("==> starting one node agent per GPU node (fake nvidia-smi of its model)")
                agents_dir, agents_kubeconfig = (
                    cluster.workdir / "agents",
                    Path(agent_credentials.kubeconfig),
                )
                start_agents(agents_dir, agents_kubeconfig, demo.agents)
                for doc in load_documents(policy_files()):
                    await apply(api, doc)
                    out(f"    applied VGPUNodePolicy {doc['metadata']['name']}")
                for doc in load_documents(demo_dra.claim_files()):
                    await apply(api, doc)
                    out(f"    applied {doc['kind']} {doc['metadata']['name']} (the DRA pool's)")
                out(
                    "==> the A30 nodes join once HAMi's plugin is pinned to the vGPU nodes (a DRA "
                    "pool added to a running cluster: HAMi's plugin never starts there)"
                )
                await demo_dra.wait_pinned(api, PLUGIN_NAMESPACE, PLUGIN_NAME, timeout)
                await create_gpu_nodes(api, demo_dra.DRA_NODES)
                start_agents(agents_dir, agents_kubeconfig, demo.agents, demo_dra.DRA_NODES)
                demo.dra = demo_dra.simulator(api, demo.agents).start()
                out(
                    "==> waiting for the operator: nodes labelled and tainted, ConfigMaps "
                    "rendered, the plugin placed and registered, every rule clean"
                )
                await wait_converged(demo, timeout)
                yield demo
            finally:
                stop_all(demo.agents)
                metrics_server.shutdown()
                metrics_server.server_close()
                metrics_thread.join(5)
                operator.stop()
                await sim.stop()
                if demo.dra is not None:
                    await demo.dra.stop(withdraw_slices=False)


async def run_demo(*, once: bool = False, out: Out = print, timeout: float = 240.0) -> int:
    async with demo_cluster(out=out, timeout=timeout) as demo:
        pools, table_now = await tables(demo.api)
        out(pools)
        out(table_now)
        if once:
            return 0
        kubectl = binaries.tool_dir(binaries.TOOL_BY_NAME["kubectl"]) / "kubectl"
        bin_dir = Path(sys.executable).parent  # the virtualenv's console scripts
        out(
            f"\nThe demo keeps running. In another shell:\n"
            f"  export KUBECONFIG={demo.kubeconfig}\n"
            f"  {kubectl} get vnp\n"
            f"  {bin_dir / 'kubectl-vgpu'}   # pools and nodes at a glance (`kubectl vgpu`)\n"
            f"  {bin_dir / 'vgpu-operator'} doctor   # with the operator's configuration\n"
            f"  {bin_dir / 'vgpu-operator'} plan rtx4090-hami-core\n"
            f"  {kubectl} edit vnp rtx4090-hami-core   # the nodes follow\n"
            f"  {kubectl} get resourceslices   # the DRA pool's GPUs, as its driver publishes\n"
            f"  {kubectl} get pods -o wide -l app=dra-inference   # its claim workload\n"
            f"  {kubectl} -n volcano-system edit configmap volcano-scheduler-configmap\n"
            f"      # remove the predicates plugin: the operator puts it back\n"
            f"Agent logs: {demo.workdir / 'agents'}/<node>/agent.log\n"
            f"Metrics (Prometheus text, what the chart's PodMonitors scrape):\n"
            + "".join(f"  curl {url}   # {who}\n" for who, url in demo.metrics_endpoints())
            + "Ctrl-C stops it and removes everything.\n"
        )
        while True:
            await asyncio.sleep(2)
            _, now = await tables(demo.api)
            if now != table_now:
                table_now = now
                out(f"--- {time.strftime('%H:%M:%S')} nodes changed:\n{table_now}")


async def tables(api: Any) -> tuple[str, str]:
    """The pools (`kubectl vgpu get pools`) and the demo's node table."""
    policies = await kubeapi.request(api, "GET", kubeapi.policy_path())
    published = await demo_dra.published_devices(api)
    return table(POOL_COLUMNS, pool_rows(policies.get("items") or [])), node_table(
        await _nodes(api), published
    )


def start_agents(
    directory: Path,
    kubeconfig: Path,
    agents: list[AgentProcess],
    specs: Iterable[NodeSpec] | None = None,
) -> None:
    """One agent subprocess per GPU node of the demo (`specs`: of these; None: the nodes that
    are there from the start, the DRA pool's join later), each with its own simulated GPUs; each
    is added to `agents` as soon as it runs (the caller stops them, also after a failure here)."""
    if specs is None:
        specs = [s for s in DEMO_NODES if s not in demo_dra.DRA_NODES]
    for spec in specs:
        if spec.model is None:
            continue
        home = directory / spec.name
        gpus = FakeGpus.create(home, spec.name, fake_model(spec.model), spec.gpus)
        agent = AgentProcess(
            spec.name, kubeconfig, gpus, home / "agent.log", resync=60.0, metrics_port=free_port()
        )
        agents.append(agent.start())


async def _plugin_pods(api: Any) -> list[dict[str, Any]]:
    body = await kubeapi.request(
        api,
        "GET",
        f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/pods",
        query={"labelSelector": f"name={PLUGIN_NAME}"},
    )
    return [p for p in body.get("items") or [] if not p["metadata"].get("deletionTimestamp")]


async def pending(demo: Demo) -> list[str]:
    """What the demo still waits for (empty: converged): every GPU node in its pool with a final
    agent state, HAMi's plugin pods Running on exactly the nodes labelled for it and each one
    registered, the DRA driver's kubelet plugin publishing on exactly the dra nodes and the claim
    workload Running there, every policy Ready and ConfigConsistent, and no rule with an error or
    warning."""
    api = demo.api
    nodes = await _nodes(api)
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    gpu_nodes = {s.name for s in DEMO_NODES if s.model is not None}
    out = [
        f"node {n} in no pool yet"
        for n in sorted(
            gpu_nodes - {n for n, lab in labels.items() if contract.LABEL_POLICY in lab}
        )
    ]
    final = {"success", "failed", "blocked"}
    out += [
        f"agent on {a.node}: {labels.get(a.node, {}).get(contract.LABEL_STATE, 'no state')}"
        for a in demo.agents
        if labels.get(a.node, {}).get(contract.LABEL_STATE) not in final
    ]
    served = {n for n, lab in labels.items() if lab.get(contract.LABEL_DEVICE_PLUGIN) == "hami"}
    pods = await _plugin_pods(api)
    running = {
        p["spec"].get("nodeName"): p["metadata"]["uid"]
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
    }
    if set(running) != served or len(pods) != len(served):
        out.append(f"plugin pods on {sorted(running)}, want {sorted(served)}")
    done = {r.pod_uid for r in demo.sim.registrations}
    out += [f"plugin on {n} not registered yet" for n, uid in running.items() if uid not in done]
    policies = await kubeapi.request(api, "GET", kubeapi.policy_path())
    for p in pool_rows(policies.get("items") or []):
        if p[4:] != ("True", "True"):
            out.append(f"policy {p[0]}: Ready {p[4]}, ConfigConsistent {p[5]}")
    if demo.dra is not None:
        out += await demo_dra.pending(api, demo.dra, labels)
    if not out:
        results = run_rules(await read_snapshot(api, demo.config))
        out += [
            f"{f.severity} {f.id}: {f.message}"
            for f in results.findings
            if f.severity in ("error", "warning")
        ]
    return out


async def wait_converged(demo: Demo, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        waiting = await pending(demo)
        if not waiting:
            return
        dead = [a.node for a in demo.agents if not a.running()]
        if dead:
            raise RuntimeError(f"node agents exited: {dead}")
        if time.monotonic() > deadline:
            raise TimeoutError("the demo did not converge:\n  " + "\n  ".join(waiting))
        await asyncio.sleep(0.5)
