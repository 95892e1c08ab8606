"""`make demo` (`vgpu-dev demo`), the README's main command, run as a person would: once it says it
keeps running, the cluster it made is checked from outside (its admin kubeconfig) as the issue asks:
`doctor` exits 0 without `--config` (it finds the demo's configuration where a chart install keeps
it, the chart's ConfigMap, and says so; `plan` too), every policy is Ready and
ConfigConsistent, HAMi's plugin pods run on exactly the vGPU nodes (hami-core and dynamic MIG),
and what the simulated plugin registered on every node matches the node-config the operator
rendered; the DRA pool's nodes have NVIDIA's DRA driver's slices (and only they), and
kube-scheduler placed the claim workload there; `plan` of each live policy changes nothing
and `kubectl vgpu` shows what was registered. The controller's and every agent's /metrics,
where the demo says to `curl` them, match the cluster: nodes per policy, mode and state (and
each node's) are the Nodes' labels, findings per rule are doctor's, each agent's state is its
Node's; and every metric the chart's alerts and dashboard query is in what was scraped. Then
the README's walk-through: `predicates` is removed from the scheduler conf, and the operator
puts it back. Ctrl-C then stops the agents, the operator and the control plane, leaving no
process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, config

from tests.cluster.helpers import eventually
from tests.cluster.metricskit import Scrape, scrape, unserved_queries
from vgpu_devcluster.demo import (
    DEMO_NODES,
    PLUGIN_NAME,
    PLUGIN_NAMESPACE,
    policy_files,
)
from vgpu_devcluster.demo_dra import DRA_NODES, workload_pods
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.core.admission.verdict import RULE_ID as ADMISSION_RULE
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register

pytestmark = pytest.mark.cluster

VGPU_NODES = {"rtx4090-0", "rtx4090-1", "rtx4090-2", "a100-0", "a100-1"}  # hami-core, dyn. MIG
DRA = {s.name: s.gpus for s in DRA_NODES}  # NVIDIA's DRA driver publishes their GPUs
# where `helm install -n vgpu-system` keeps the operator configuration, and the demo too
DEMO_CONFIG = "ConfigMap vgpu-system/vgpu-operator-config, key config.yaml"
SCHED_NS, SCHED_CM, SCHED_KEY = (
    "volcano-system",
    "volcano-scheduler-configmap",
    "volcano-scheduler.conf",
)


async def cli(*args: str, command: str = "vgpu_operator.commands.cli") -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        command,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return int(proc.returncode or 0), out.decode(), err.decode()


async def doctor(kubeconfig: Path) -> tuple[int, dict[str, Any]]:
    """`doctor` without `--config`: it finds the demo's configuration where a chart install
    keeps it, and says so."""
    code, out, err = await cli("doctor", "--kubeconfig", str(kubeconfig), "-o", "json")
    assert out, err
    assert f"operator configuration: {DEMO_CONFIG}" in err, err
    return code, json.loads(out)


async def check_plugin_and_registration(api: client.ApiClient) -> None:
    # HAMi's plugin pods run on exactly the vGPU nodes
    pods = await kubeapi.request(
        api,
        "GET",
        f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/pods",
        query={"labelSelector": f"name={PLUGIN_NAME}"},
    )
    live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    assert sorted(p["spec"]["nodeName"] for p in live) == sorted(VGPU_NODES)
    assert {p["status"]["phase"] for p in live} == {"Running"}
    # what was registered on each node is what its rendered node-config entry says
    node_cm = await kubeapi.request(
        api, "GET", configmap_path(PLUGIN_NAMESPACE, "volcano-vgpu-node-config")
    )
    entries = {e["name"]: e for e in json.loads(node_cm["data"]["config.json"])["nodeconfig"]}
    for spec in DEMO_NODES:
        if spec.model is None:
            continue
        node = await kubeapi.request(api, "GET", kubeapi.node_path(spec.name))
        if spec.name in DRA:  # no node-config entry, nothing of HAMi's
            assert spec.name not in entries, entries[spec.name]
            assert REGISTER_ANNOTATION not in node["metadata"]["annotations"], spec.name
            continue
        entry = entries[spec.name]
        filtered = set(entry.get("filterdevices", {}).get("index") or [])
        allocatable = int(node["status"].get("allocatable", {}).get("volcano.sh/vgpu-number", 0))
        if spec.name not in VGPU_NODES:
            # static MIG: NVIDIA's plugin serves it; the entry filters every GPU, HAMi's
            # plugin does not run there and nothing of it is allocatable
            assert filtered == set(range(spec.gpus)), entry
            assert allocatable == 0, spec.name
            continue
        records = parse_register(node["metadata"]["annotations"][REGISTER_ANNOTATION])
        assert len(records) == spec.gpus - len(filtered), (spec.name, entry)
        assert {r.mode for r in records} == {entry["operatingmode"]}, (spec.name, entry)
        assert {r.count for r in records} == {entry["devicesplitcount"]}, (spec.name, entry)
        assert allocatable == sum(r.count for r in records), spec.name
    mode = {n: e["operatingmode"] for n, e in entries.items() if n in VGPU_NODES}
    assert mode == {**dict.fromkeys(VGPU_NODES, "hami-core"), "a100-0": "mig", "a100-1": "mig"}


async def check_policies(api: client.ApiClient) -> list[str]:
    listing = await kubeapi.request(api, "GET", kubeapi.policy_path())
    names = []
    for p in listing["items"]:
        conditions = {c["type"]: c["status"] for c in p["status"]["conditions"]}
        assert conditions["Ready"] == "True", p["status"]
        assert conditions["ConfigConsistent"] == "True", p["status"]
        names.append(p["metadata"]["name"])
    assert len(names) == 4
    return names


async def check_dra_pool(api: client.ApiClient) -> None:
    """The DRA pool: each node's slice publishes its GPUs whole, and kube-scheduler bound every
    pod of the claim workload to a DRA node with an allocated device of that node."""
    slices = await kubeapi.request(api, "GET", "/apis/resource.k8s.io/v1/resourceslices")
    devices: Counter[str] = Counter()
    for s in slices["items"]:
        assert s["spec"]["driver"] == "gpu.nvidia.com"
        devices[s["spec"]["nodeName"]] += len(s["spec"]["devices"])
    assert devices == DRA, devices  # and no slice elsewhere
    pods = await workload_pods(api)
    assert len(pods) == 2
    for pod in pods:
        node = pod["spec"]["nodeName"]
        assert node in DRA and pod["status"]["phase"] == "Running", pod["status"]
        [status] = pod["status"]["resourceClaimStatuses"]
        claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
        claim = await kubeapi.request(api, "GET", f"{claims}/{status['resourceClaimName']}")
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == ("gpu.nvidia.com", node), result


async def break_predicates(api: client.ApiClient) -> None:
    """The README's walk-through: remove `predicates` from the scheduler conf (as
    `kubectl edit` would), and the operator puts it back, keeping the rest."""
    path = configmap_path(SCHED_NS, SCHED_CM)
    cm = await kubeapi.request(api, "GET", path)
    conf = yaml.safe_load(cm["data"][SCHED_KEY])
    for tier in conf["tiers"]:
        tier["plugins"] = [p for p in tier["plugins"] if p["name"] != "predicates"]
    cm["data"][SCHED_KEY] = yaml.safe_dump(conf)
    await kubeapi.request(api, "PUT", path, body=cm, field_manager="kubectl-edit")
    kept = {p["name"] for t in conf["tiers"] for p in t["plugins"]}

    async def restored() -> bool:
        now = await kubeapi.request(api, "GET", path)
        tiers = yaml.safe_load(now["data"][SCHED_KEY])["tiers"]
        plugins = {p["name"] for t in tiers for p in t["plugins"]}
        return plugins == {*kept, "predicates"}

    await eventually(restored, timeout=30, interval=0.5)
    # what the README shows: the operator's Event on the ConfigMap
    events = await kubeapi.request(
        api,
        "GET",
        f"/api/v1/namespaces/{SCHED_NS}/events",
        query={"fieldSelector": "reason=ConfigRendered"},
    )
    assert SCHED_CM in {e["involvedObject"]["name"] for e in events["items"]}, events


# what the demo prints: "  curl http://127.0.0.1:PORT/metrics   # controller" (or "# agent on N")
METRICS_LINE = re.compile(r"^\s*curl (http://\S+/metrics)\s+# (controller|agent on (\S+))$")


def metrics_endpoints(lines: list[str]) -> tuple[str, dict[str, str]]:
    """The controller's /metrics URL and each agent's, by node, from the demo's output."""
    found = [m for line in lines if (m := METRICS_LINE.match(line.rstrip()))]
    [controller] = [m[1] for m in found if m[2] == "controller"]
    agents = {m[3]: m[1] for m in found if m[3]}
    assert set(agents) == {s.name for s in DEMO_NODES if s.model}, lines
    return controller, agents


async def check_metrics(
    api: client.ApiClient, endpoints: tuple[str, dict[str, str]], report: dict[str, Any]
) -> None:
    """The running demo's metrics against its cluster and against doctor's report."""
    controller_url, agent_urls = endpoints
    nodes = (await kubeapi.request(api, "GET", kubeapi.node_path()))["items"]
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    owned = {n: lab for n, lab in labels.items() if contract.LABEL_POLICY in lab}
    assert set(owned) == set(agent_urls)  # every GPU node is in a pool, cpu-0 in none
    want_nodes = {
        n: (lab[contract.LABEL_POLICY], lab[contract.LABEL_MODE], lab[contract.LABEL_STATE])
        for n, lab in owned.items()
    }
    # The admission-policies rule reads objects only doctor's snapshot holds: the controller
    # checks them itself and reports the AdmissionPoliciesEnforced condition instead
    # (operator/vgpu_operator/core/rules/admission.py).
    want_findings = Counter(
        (f["id"], f["severity"]) for f in report["findings"] if f["id"] != ADMISSION_RULE
    )
    assert want_findings  # the converged demo still has its info findings

    def node_series(page: Scrape) -> dict[str, tuple[str, str, str]]:
        return {
            lab["node"]: (lab["policy"], lab["mode"], lab["state"])
            for lab, v in page.values("vgpu_operator_node_info")
            if v == 1
        }

    def managed(page: Scrape) -> Counter[tuple[str, str, str]]:
        return Counter(
            {
                (lab["policy"], lab["mode"], lab["state"]): int(v)
                for lab, v in page.values("vgpu_operator_nodes_managed")
                if v
            }
        )

    def findings(page: Scrape) -> dict[tuple[str, str], int]:
        return {
            (lab["rule"], lab["severity"]): int(v)
            for lab, v in page.values("vgpu_operator_findings")
        }

    async def controller_matches() -> bool:
        page = scrape(controller_url)
        return (
            node_series(page) == want_nodes
            and managed(page) == Counter(want_nodes.values())
            and findings(page) == dict(want_findings)
        )

    # the controller exports after its next pass; the asserts below show what differs
    with contextlib.suppress(AssertionError):
        await eventually(controller_matches, timeout=15, interval=0.5)
    controller = scrape(controller_url)
    assert node_series(controller) == want_nodes
    assert managed(controller) == Counter(want_nodes.values())
    assert findings(controller) == dict(want_findings), "the controller's findings are not doctor's"
    policies = {p for p, _, _ in want_nodes.values()}
    for policy in policies:
        assert controller.total("vgpu_operator_policy_condition", policy=policy, condition="Ready")
        assert controller.total("vgpu_operator_transitions_in_flight", policy=policy) == 0
    assert controller.total("vgpu_operator_reconciliations_total", result="ok") >= len(policies)
    # each agent: its state is its Node's, its GPUs the node's, and it has asked nvidia-smi
    agents = {node: scrape(url) for node, url in agent_urls.items()}
    gpus = {s.name: s.gpus for s in DEMO_NODES}
    for node, page in agents.items():
        state = want_nodes[node][2]
        assert page.total("vgpu_operator_agent_state", state=state) == 1, (node, state)
        assert page.total("vgpu_operator_agent_state") == 1, node
        assert page.total("vgpu_operator_agent_gpus") == gpus[node], node
        assert page.total("vgpu_operator_agent_nvidia_smi_calls_total", outcome="ok") > 0
    # what the alerts and the dashboard query, Prometheus would find
    assert not unserved_queries(controller, agents.values())


async def check_running_demo(
    kubeconfig: Path, demo_dir: Path, endpoints: tuple[str, dict[str, str]]
) -> None:
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api:
        code, report = await doctor(kubeconfig)
        assert code == 0, report["findings"]
        assert {f["severity"] for f in report["findings"]} <= {"info"}
        names = await check_policies(api)
        await check_plugin_and_registration(api)
        await check_dra_pool(api)
        for name in names:
            code, out, err = await cli("plan", name, "--kubeconfig", str(kubeconfig))
            assert code == 0, out + err
            assert "nothing would change" in out
            assert f"operator configuration: {DEMO_CONFIG}" in err, err
        code, out, err = await cli(
            "--kubeconfig", str(kubeconfig), command="vgpu_operator.commands.kubectl_plugin"
        )
        assert code == 0, err
        rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
        assert rows["rtx4090-0"][-1] == "4xhami-core/40"
        assert rows["a100-1"][-1] == "8xmig/80"
        assert rows["h100-0"][-1] == "-"
        assert rows["rtx4090-hami-core"][-2:] == ["True", "True"]
        # the README's plan of a MIG layout change of the H100 pool
        text = Path(policy_files()[0]).read_text().replace("1g.20gb: 4", "3g.40gb: 2")
        changed = Path(demo_dir) / "policies.yaml"
        changed.write_text(text)
        code, out, err = await cli(
            "plan", "-f", str(changed), "--kubeconfig", str(kubeconfig), "-o", "json"
        )
        assert code == 1, out + err  # 1: something would change
        result = json.loads(out)
        assert [(n["node"], n["disruptive"]) for n in result["nodes"]] == [
            ("h100-0", "MIG layout changes")
        ]
        assert [w["nodes"] for w in result["rollout"]] == [["h100-0"]]
        await check_metrics(api, endpoints, report)
        await break_predicates(api)


def test_demo_converges_checks_out_and_ctrl_c_removes_everything(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpu_devcluster.cli", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    deadline = time.monotonic() + 240
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "Ctrl-C stops it" in line:
                break
            assert time.monotonic() < deadline, "".join(seen)
        output = "".join(seen)
        assert "Ctrl-C stops it" in output, output
        rows = {line.split()[0]: line.split() for line in seen if line.strip()}
        assert rows["NODE"][-3:] == ["CONFIG", "REGISTERED", "STATE"], output
        assert rows["rtx4090-0"][2:4] == ["rtx4090-hami-core", "hami-core"]
        assert rows["h100-0"][-3:] == ["mig/static", "-", "success"]  # NVIDIA's plugin's node
        assert rows["a100-1"][-3:] == ["mig/dynamic", "8xmig/80", "success"]
        assert rows["rtx4090-0"][-2:] == ["4xhami-core/40", "success"]
        assert rows["cpu-0"][2] == "-" and rows["cpu-0"][-1] == "-"  # no GPU, no agent
        # the DRA pool: its mode, the devices NVIDIA's DRA driver publishes on each node
        assert rows["a30-dra"][1] == "dra", output
        assert rows["a30-0"][2:4] == ["a30-dra", "dra"]
        assert rows["a30-0"][-3:] == ["dra", "2xgpu.nvidia.com", "success"], output
        [kubeconfig] = [
            line.split("=", 1)[1].strip() for line in seen if "export KUBECONFIG=" in line
        ]
        # this demo's own directory: another demo on the machine has its own
        workdir = str(Path(kubeconfig).parent)
        endpoints = metrics_endpoints(seen)
        agents = subprocess.run(
            ["pgrep", "-f", f"vgpu_operator.commands.cli agent --node .*{workdir}"],
            capture_output=True,
            check=False,
        )
        assert len(agents.stdout.splitlines()) == len([s for s in DEMO_NODES if s.model]), seen
        # keep reading what the demo prints (a full pipe would stop it)
        drain = threading.Thread(target=lambda: seen.extend(proc.stdout or ()), daemon=True)
        drain.start()
        asyncio.run(check_running_demo(Path(kubeconfig), tmp_path, endpoints))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 130, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # nothing left: neither the control plane nor an agent (their command lines name the
    # demo's directory)
    left = subprocess.run(["pgrep", "-f", workdir], capture_output=True, check=False)
    assert left.stdout == b"", left.stdout
