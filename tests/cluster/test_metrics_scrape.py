"""Metrics and monitors against the real control plane.

- Node agents (processes with `--metrics-port`, fake nvidia-smi) are scraped once a static MIG
  pool and a hami-core pool have converged: the MIG instances the agent exports match its
  inventory annotation, its GPUs their MIG mode, and its nvidia-smi calls the fake's call log.
  (The controller's metrics against the cluster, and every metric the chart's alerts and
  dashboard query, are checked on the running demo: test_demo.py.)
- The chart's monitors and PrometheusRule pass `kubectl apply --dry-run=server` once the
  monitoring.coreos.com CRDs (from the prometheus-operator Go module) are installed, and the
  apiserver does refuse a malformed one.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    MIXED,
    Agents,
    agent_kubeconfig_path,
    agents,
    wait_state,
)
from tests.cluster.agentkit import inventory as node_inventory
from tests.cluster.helpers import PolicyFactory, unique
from tests.cluster.metricskit import MONITORING_APIS, scrape
from vgpu_devcluster import binaries
from vgpu_devcluster.agentproc import AgentProcess
from vgpu_devcluster.cluster import free_port
from vgpu_devcluster.install import VAP_API, render_chart
from vgpu_devcluster.monitoring_tools import ensure_monitoring_crds
from vgpu_operator.controller.runner import OperatorThread

__all__ = ["agent_kubeconfig_path", "agents"]  # fixtures

pytestmark = pytest.mark.cluster


async def test_agent_metrics_match_inventory_and_nvidia_smi_calls(
    api: client.ApiClient,
    operator: OperatorThread,  # labels the nodes the agents act on
    policies: PolicyFactory,
    agents: Agents,
) -> None:
    pool = unique("metrics")
    a100 = await agents.node("A100-SXM4-80GB", 1, labels={"test/pool": f"{pool}-mig"})
    rtx = await agents.node("RTX-4090", 2, labels={"test/pool": f"{pool}-hami"})
    started: dict[str, AgentProcess] = {}
    for node in (a100, rtx):
        log = agents.directory / node.name / "agent-metrics.log"
        agent = AgentProcess(node.name, agents.kubeconfig, node.gpus, log, metrics_port=free_port())
        agents.started.append(agent.start())
        started[node.name] = agent
    layout = [{"gpus": "all", "profiles": MIXED}]
    await policies(
        "mig",
        {
            "nodeSelector": {"matchLabels": {"test/pool": f"{pool}-mig"}},
            "mode": "mig",
            "mig": {"partitioning": "static", "layout": layout},
        },
    )
    await policies(
        "hami",
        {"nodeSelector": {"matchLabels": {"test/pool": f"{pool}-hami"}}, "mode": "hami-core"},
    )
    for node in (a100, rtx):
        await wait_state(api, node.name, "success", started[node.name], timeout=60)

    pages = {name: scrape(agent.metrics_port) for name, agent in started.items()}
    inventory = await node_inventory(api, a100.name)
    want = Counter((str(g.index), gi.name) for g in inventory.gpus for gi in g.instances)
    got = {
        (labels["gpu"], labels["profile"]): int(v)
        for labels, v in pages[a100.name].values("vgpu_operator_agent_mig_instances")
    }
    assert got == dict(want) and sum(want.values()) == sum(MIXED.values())
    assert pages[a100.name].total("vgpu_operator_agent_gpus", mig_mode="enabled") == 1
    assert pages[rtx.name].total("vgpu_operator_agent_gpus", mig_mode="n/a") == 2
    for name, node in ((a100.name, a100), (rtx.name, rtx)):
        page = pages[name]
        assert page.total("vgpu_operator_agent_state", state="success") == 1
        assert page.total("vgpu_operator_agent_mig_applies_total", state="success") >= 1
        calls = [e for e in node.gpus.log() if "rc" in e and e.get("argv") != ["<reboot>"]]
        counted = page.total("vgpu_operator_agent_nvidia_smi_calls_total", outcome="ok")
        counted += page.total("vgpu_operator_agent_nvidia_smi_calls_total", outcome="error")
        assert counted == len(calls) > 0
        assert page.total("vgpu_operator_agent_nvidia_smi_timeouts_total") == 0


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.ensure("kubectl")), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_monitors_apply_with_server_dry_run(kubeconfig: Path, installed: Any) -> None:
    crds = ensure_monitoring_crds()
    for crd in crds:
        applied = kubectl(kubeconfig, "apply", "--server-side", "-f", str(crd))
        assert applied.returncode == 0, applied.stderr
    names = [yaml.safe_load(c.read_text())["metadata"]["name"] for c in crds]
    waited = kubectl(
        kubeconfig,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *[f"crd/{n}" for n in names],
    )
    assert waited.returncode == 0, waited.stderr
    docs = [
        d
        for d in render_chart(api_versions=(VAP_API, *MONITORING_APIS))
        if d["apiVersion"].startswith("monitoring.coreos.com/")
        or d["metadata"]["name"].endswith("-dashboard")
    ]
    assert sorted(d["kind"] for d in docs) == [
        "ConfigMap",
        "PodMonitor",
        "PodMonitor",
        "PodMonitor",
        "PrometheusRule",
        "ServiceMonitor",
    ]
    text = yaml.safe_dump_all(docs)
    dry = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=text)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("(server dry run)") == len(docs), dry.stdout
    # the dry run does validate: a PodMonitor port that is not a name is refused
    [pod_monitor] = [d for d in docs if d["metadata"]["name"].endswith("-controller")]
    pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] = 9090
    bad = kubectl(
        kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(pod_monitor)
    )
    assert bad.returncode != 0 and "port" in bad.stderr, bad.stdout + bad.stderr
