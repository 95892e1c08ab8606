"""The operator against Volcano's and HAMi's own install manifests, unmodified
(`devcluster.upstream`), next to the demo's pools (`examples/demo/policies.yaml`: hami-core RTX
4090s, dynamic-MIG A100s, a static-MIG H100) and a CPU node.

As shipped, HAMi's plugin DaemonSet has no nodeSelector and does not tolerate the policies' taint:
it runs on the static-MIG and CPU nodes and on none of the nodes that need it. `report` mode says
so with the exact patch and writes nothing to it; `enforce` mode pins it to the nodes labelled
`vgpu.volcano.sh/device-plugin=hami` with one PATCH, and then: HAMi's plugin pods run on exactly
the hami-core and dynamic-MIG nodes, the simulated plugin registers exactly where they run, the
static node's node-config entry filters every GPU, the scheduler conf has deviceshare with
VGPUEnable, and `vgpu-operator doctor` exits 0 (with `gpuMemoryFactor: 11`, what 8 x 80 GB nodes
need). The same with plugin v1.11.0 and custom nodeTaints on one pool."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import (
    ClusterUnderTest,
    NodeFactory,
    PolicyFactory,
    eventually,
    unique,
)
from tests.cluster.volcano_ops import (
    OperatorFactory,
    operator_writes,
    run_doctor,
    volcano_operator,
)
from vgpu_devcluster import upstream
from vgpu_devcluster.binaries import repo_root
from vgpu_devcluster.pluginsim import PluginSimulator
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.snapshot import configmap_path, read_snapshot, workload_path
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.placement import placement_patch_text, placements
from vgpu_operator.models.config import load_config
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_register
from vgpu_operator.models.volcano_views import parse_scheduler_conf

__all__ = ["volcano_operator"]

NS, DS = "kube-system", "volcano-device-plugin"
DS_PATH = workload_path("DaemonSet", NS, DS)
POOL = "test/upstream-pool"
CONFIG = "gpuMemoryFactor: 11\n"  # 8 x 81920 MiB / 11 = 59576 memory entries (<= 60000)
COUNT, CORES, MEMORY = "volcano.sh/vgpu-number", "volcano.sh/vgpu-cores", "volcano.sh/vgpu-memory"
CUSTOM_TAINT = {"key": "example.com/gpu-pool", "value": "rtx4090", "effect": "NoSchedule"}


@dataclass
class Demo:
    """The demo's pools in small: 2 x RTX 4090 (hami-core), 1 x A100 80GB x 8 (dynamic MIG),
    1 x H100 x 8 (static MIG), 1 CPU node."""

    rtx: list[str]
    a100: list[str]
    h100: list[str]
    cpu: list[str]

    @property
    def served(self) -> set[str]:
        return {*self.rtx, *self.a100}

    @property
    def gpu(self) -> set[str]:
        return {*self.rtx, *self.a100, *self.h100}

    @property
    def all(self) -> set[str]:
        return {*self.gpu, *self.cpu}


async def demo_nodes(make_nodes: NodeFactory, pool: str) -> Demo:
    labels = {POOL: pool}
    return Demo(
        rtx=await make_nodes("RTX-4090", 2, gpus=4, labels=labels, prefix="rtx4090"),
        a100=await make_nodes("A100-SXM4-80GB", 1, gpus=8, labels=labels, prefix="a100"),
        h100=await make_nodes("H100-80GB-HBM3", 1, gpus=8, labels=labels, prefix="h100"),
        cpu=await make_nodes(None, 1, labels=labels, prefix="cpu"),
    )


async def demo_policies(
    policies: PolicyFactory, pool: str, *, rtx_taints: list[dict[str, str]] | None = None
) -> dict[str, str]:
    """The demo's policies as the example ships them, each also selecting on the test's pool
    label; `rtx_taints`: custom nodeTaints for the hami-core pool. Example name -> created."""
    path = repo_root() / "examples" / "demo" / "policies.yaml"
    out = {}
    for doc in yaml.safe_load_all(path.read_text()):
        spec = copy.deepcopy(doc["spec"])
        spec["nodeSelector"]["matchLabels"][POOL] = pool
        if rtx_taints is not None and spec["mode"] == "hami-core":
            spec["nodeTaints"] = rtx_taints
        out[doc["metadata"]["name"]] = await policies(doc["metadata"]["name"], spec)
    return out


@pytest.fixture
async def upstream_install(api: client.ApiClient) -> AsyncIterator[list[upstream.Installed]]:
    """Installs made in the test (`installed.append(await upstream.install(...))`) are removed
    afterwards, with the simulated plugin stopped first."""
    installed: list[upstream.Installed] = []
    yield installed
    for done in installed:
        await upstream.uninstall(api, done)


async def plugin_pods(api: client.ApiClient) -> dict[str, str]:
    """node -> uid of its live (Running, not terminating) HAMi plugin pod."""
    body = await kubeapi.request(
        api, "GET", f"/api/v1/namespaces/{NS}/pods", query={"labelSelector": f"name={DS}"}
    )
    return {
        p["spec"]["nodeName"]: p["metadata"]["uid"]
        for p in body.get("items") or []
        if p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") == "Running"
    }


async def registered_resources(api: client.ApiClient, names: set[str]) -> dict[str, int]:
    """node -> allocatable vgpu-number (0 when absent), for `names`."""
    out = {}
    for name in sorted(names):
        node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
        out[name] = int(((node.get("status") or {}).get("allocatable") or {}).get(COUNT, "0"))
    return out


async def register_modes(api: client.ApiClient, name: str) -> set[str | None]:
    node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
    raw = (node["metadata"].get("annotations") or {}).get(REGISTER_ANNOTATION, "")
    return {r.mode for r in parse_register(raw)}


# HAMi's plugin manifest v1.11.0 (and v1.10.0) gives the A100-80GB a group with `7g.79gb`, a
# profile no A100-80GB has (Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:
# volcano-vgpu-device-plugin.yml, knownMigGeometries; v1.12.0 names it `7g.80gb`): the
# mig-geometry-groups rule names that group, the one finding left once v1.11.0 converges.
V1_11_GROUP = ("mig-geometry-groups", "7g.79gb")


async def converged(
    api: client.ApiClient,
    demo: Demo,
    sim: PluginSimulator,
    config: str,
    timeout: float = 150,
    expected: tuple[str, str] | None = None,
) -> None:
    """Plugin pods on exactly the served nodes, each registered by its current pod in its
    mode, nothing registered elsewhere, and no rule with an error or a warning (but the one
    `expected`: a rule id and a text its message holds)."""
    cfg = load_config(config)
    state: dict[str, Any] = {}

    async def done() -> bool:
        pods = await plugin_pods(api)
        state["pods"] = sorted(pods)
        if set(pods) != demo.served:
            return False
        by_pod = {r.pod_uid for r in sim.registrations}
        if not all(uid in by_pod for uid in pods.values()):
            return False
        counts = await registered_resources(api, demo.all)
        state["registered"] = counts
        if {n for n, c in counts.items() if c > 0} != demo.served:
            return False
        modes = {n: await register_modes(api, n) for n in demo.served}
        state["modes"] = modes
        want = {n: {"hami-core" if n in demo.rtx else "mig"} for n in demo.served}
        if modes != want:
            return False
        results = run_rules(await read_snapshot(api, cfg))
        state["findings"] = [
            (f.id, f.message)
            for f in results.findings
            if f.severity in ("error", "warning")
            and not (expected and f.id == expected[0] and expected[1] in f.message)
        ]
        return not state["findings"]

    try:
        await eventually(done, timeout=timeout, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {state}") from None


async def assert_placed(
    api: client.ApiClient, demo: Demo, extra_tolerations: list[dict[str, str]]
) -> None:
    """The DaemonSet as the operator leaves it: the shipped tolerations kept, the policies'
    taints tolerated, a nodeSelector on the node contract's label; the static node's entry
    filters every GPU; the scheduler conf has deviceshare with VGPUEnable."""
    ds = await kubeapi.request(api, "GET", DS_PATH)
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {contract.LABEL_DEVICE_PLUGIN: "hami"}
    shipped = upstream.hami_vgpu_documents()[-1]["spec"]["template"]["spec"]["tolerations"]
    assert spec["tolerations"] == [*shipped, *extra_tolerations]
    node_cm = await kubeapi.request(api, "GET", configmap_path(NS, "volcano-vgpu-node-config"))
    entries = {e["name"]: e for e in json.loads(node_cm["data"]["config.json"])["nodeconfig"]}
    assert "aio-node67" in entries  # the manifest's sample entry is not the operator's
    [h100] = demo.h100
    assert entries[h100]["operatingmode"] == "hami-core"
    assert entries[h100]["filterdevices"]["index"] == list(range(8))
    assert {entries[n]["operatingmode"] for n in demo.a100} == {"mig"}
    assert {entries[n]["operatingmode"] for n in demo.rtx} == {"hami-core"}
    sched = await kubeapi.request(
        api, "GET", configmap_path("volcano-system", "volcano-scheduler-configmap")
    )
    conf = parse_scheduler_conf(sched["data"]["volcano-scheduler.conf"], string_bools=True)
    assert conf.plugin("deviceshare") is not None and conf.deviceshare.vgpu_enable
    assert conf.plugin("predicates") is not None


def policy_toleration(taint: dict[str, str]) -> dict[str, str]:
    return {
        "key": taint["key"],
        "operator": "Equal",
        "value": taint["value"],
        "effect": "NoSchedule",
    }


DEFAULT_TOLERATION = policy_toleration(
    {"key": "volcano.sh/vgpu", "value": "hami", "effect": "NoSchedule"}
)


async def doctor_exits_0(
    kubeconfig: Path, tmp_path: Path, expected: tuple[str, str] | None = None
) -> None:
    """doctor finds nothing above info; with `expected` (a rule id and a text of its message),
    exactly that one error besides, and exits 1 for it."""
    config = tmp_path / "operator-config.yaml"
    config.write_text(CONFIG)
    code, out, err = await run_doctor(kubeconfig, "--config", str(config), "-o", "json")
    report = json.loads(out)
    above = [f for f in report["findings"] if f["severity"] != "info"]
    if expected is None:
        assert code == 0, (report["findings"], err)
        assert not above
        return
    assert code == 1, (report["findings"], err)
    assert [(f["id"], expected[1] in f["message"]) for f in above] == [(expected[0], True)], above


async def test_shipped_manifests_report_mode_then_enforce(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    volcano_operator: OperatorFactory,
    upstream_install: list[upstream.Installed],
) -> None:
    local = cluster.require_audit()
    pool = unique("demo")
    demo = await demo_nodes(make_nodes, pool)
    # As a new user: the pools first (report mode: the operator labels and taints the nodes,
    # and writes nothing to Volcano or HAMi), then Volcano's and HAMi's install manifests.
    report = volcano_operator("mode: report\n" + CONFIG)
    await demo_policies(policies, pool)

    async def tainted() -> bool:
        for name in demo.served:
            node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
            if not (node.get("spec") or {}).get("taints"):
                return False
        return True

    await eventually(tainted, timeout=60)
    offset = local.audit_offset()
    upstream_install.append(await upstream.install(api, hami="v1.12.0"))
    sim = PluginSimulator(api, namespace=NS, name=DS).start()
    try:
        # what the issue saw: the plugin on the static-MIG and CPU nodes, on none that need it
        async def shipped_placement() -> bool:
            return set(await plugin_pods(api)) & demo.all == {*demo.h100, *demo.cpu}

        await eventually(shipped_placement, timeout=60)

        # the simulated plugin registers where its pods run and the node has GPUs: vGPU
        # resources on the static-MIG node, the hazard of a plugin NVIDIA's plugin competes with
        async def registered_where_running() -> bool:
            counts = await registered_resources(api, demo.all)
            return {n for n, c in counts.items() if c > 0} == set(demo.h100)

        await eventually(registered_where_running, timeout=30, interval=0.3)
        ds = await kubeapi.request(api, "GET", DS_PATH)
        snapshot = await read_snapshot(api, load_config("mode: report\n" + CONFIG))
        [expected] = placements(snapshot)
        assert expected.patch is not None
        patch = placement_patch_text(expected)
        assert json.loads(patch)["spec"]["template"]["spec"]["tolerations"][-1] == (
            DEFAULT_TOLERATION
        )
        assert report.controller.volcano is not None
        volcano = report.controller.volcano

        async def reported() -> bool:
            return any(f.id == "plugin-placement" for f in volcano.findings or [])

        await eventually(reported, timeout=60)
        [finding] = [f for f in volcano.findings or [] if f.id == "plugin-placement"]
        assert finding.severity == "error" and finding.fixable_by_operator
        assert f"kubectl -n {NS} patch daemonset {DS} --type=strategic -p '{patch}'" in (
            finding.fix
        )
        [h100], [cpu] = demo.h100, demo.cpu
        assert f"{h100} (static MIG: NVIDIA's device plugin serves it)" in finding.message
        assert f"{cpu} (in no pool)" in finding.message
        for name in demo.served:
            assert f"{name} (it does not tolerate volcano.sh/vgpu=hami:NoSchedule)" in (
                finding.message
            )
        after = await kubeapi.request(api, "GET", DS_PATH)
        assert after["metadata"]["resourceVersion"] == ds["metadata"]["resourceVersion"]
        writes = operator_writes(local, offset)
        assert not [w for w in writes if w[1] in ("daemonsets", "configmaps", "deployments")]

        # enforce: one placement PATCH, and everything converges
        report.stop()
        offset = local.audit_offset()
        volcano_operator(CONFIG)
        await converged(api, demo, sim, CONFIG)
        await assert_placed(api, demo, [DEFAULT_TOLERATION])
        await doctor_exits_0(kubeconfig, tmp_path)
        writes = operator_writes(local, offset)
        assert writes[("patch", "daemonsets", NS, DS)] == 1, writes  # only when different
        # the static node's plugin pod went, and kubelet's allocatable with it
        assert demo.h100[0] in sim.withdrawn
    finally:
        await sim.stop()


async def test_plugin_v1_11_with_custom_node_taints(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    volcano_operator: OperatorFactory,
    upstream_install: list[upstream.Installed],
) -> None:
    local = cluster.require_audit()
    pool = unique("demo")
    demo = await demo_nodes(make_nodes, pool)
    # the manifests first this time: the plugin starts on every (untainted) node
    upstream_install.append(await upstream.install(api, hami="v1.11.0"))
    sim = PluginSimulator(api, namespace=NS, name=DS).start()
    try:

        async def everywhere() -> bool:
            return set(await plugin_pods(api)) >= demo.all

        await eventually(everywhere, timeout=60)

        # as shipped, the simulated plugin registers every GPU node it runs on
        async def registered_on_gpu_nodes() -> bool:
            counts = await registered_resources(api, demo.all)
            return {n for n, c in counts.items() if c > 0} == demo.gpu

        await eventually(registered_on_gpu_nodes, timeout=30, interval=0.3)
        offset = local.audit_offset()
        volcano_operator(CONFIG)
        await demo_policies(policies, pool, rtx_taints=[CUSTOM_TAINT])
        await converged(api, demo, sim, CONFIG, expected=V1_11_GROUP)
        await assert_placed(api, demo, [policy_toleration(CUSTOM_TAINT), DEFAULT_TOLERATION])
        ds = await kubeapi.request(api, "GET", DS_PATH)
        args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--gpu-memory-factor=11" in args and "--device-split-count=10" in args
        await doctor_exits_0(kubeconfig, tmp_path, expected=V1_11_GROUP)
        writes = operator_writes(local, offset)
        # args and placement in one PATCH, counted as the DaemonSet's one restart
        assert writes[("patch", "daemonsets", NS, DS)] == 1, writes
        for name in demo.rtx:
            node = await kubeapi.request(api, "GET", kubeapi.node_path(name))
            assert CUSTOM_TAINT in node["spec"]["taints"]
    finally:
        await sim.stop()
