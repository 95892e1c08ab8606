"""One node or its agent cannot stall or poison the others, with the controller and real agent
processes (their GPUs the fake nvidia-smi) on the real apiserver (issue 29; GPU counts of 10^12
and 10^8: test_hostile_nodes.py; a proxy's Retry-After, a hanging exec plugin:
test_hostile_transport.py; the pure cases: tests/unit/core/rules/test_node_bounds.py,
tests/unit/core/volcano/test_geometry_shadowing.py,
tests/unit/core/mig/test_mig_partition_bounds.py, tests/unit/test_logs.py).

One scene for the module: a Volcano/HAMi install, the controller (in this process) and these
H100 nodes, one GPU each.
- A static-MIG pool: `good` and `listed24` with their agents, and `huge`, configured by the
  pool's policy before (its released configuration, labels and taint are there) and now
  labelled `nvidia.com/gpu.count: 200000`, with no inventory (its agent has not reported: a
  node-config entry is made from the inventory when there is one, so the label is read only
  until then). The label once made the node-config over 1 MiB, so no entry was written for any
  node: the other nodes' entries are written, `huge`'s filters the 64 indexes a policy may name,
  the operator writes nothing to `huge`, `node-input-bounds` and the policy's status name it with
  the label, and the process running the controller grows by less than 64 MiB.
- `listed24`'s nvidia-smi lists 24 GPU instances (the planner was combinatorial in them: 21 s on
  the agent's event loop): its agent refuses within seconds, as its state `failed` and a
  Warning Event on the node say (more instances than compute slices), while `good`'s agent
  applies the layout.
- A dynamic-MIG pool: `h100`, and `forged`, whose inventory (written as whoever holds the
  node's agent credentials may) names its GPU `H1`, part of `NVIDIA H100 80GB HBM3`: the device
  config's entry for the H100 stays the catalog's, no entry is `H1`'s, and
  `mig-geometry-reports` names `forged`.
- `escapes`, in no pool: its released configuration, written by hand, names a MIG profile
  holding NEL (U+0085), the one-byte CSI (U+009B) and U+2028; its agent reports it unreadable
  (before the controller starts: the controller rewrites an unreadable value of its own key),
  and the agent's log has the three escaped, none raw (the controller's side:
  test_hostile_transport.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.agentkit import (
    Agents,
    GpuNode,
    agent_events,
    agent_kubeconfig_path,
    get_node,
    wait_state,
)
from tests.cluster.auditkit import create_policy, gone
from tests.cluster.helpers import eventually, rss_mib, unique
from tests.cluster.volcano_env import (
    DEVICE_CM,
    NODE_CM,
    PLUGIN_NS,
    VolcanoEnv,
    json_entries,
    managed_node,
)
from tests.cluster.volcano_ops import fast_passes
from tests.kit import hostile
from vgpu_devcluster import fakesmi_state as fs
from vgpu_devcluster.agentproc import AgentProcess
from vgpu_devcluster.nodes import NodeSpec, create_gpu_nodes
from vgpu_operator import bounds, contract, kubeapi
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.core.rules.base import Finding
from vgpu_operator.core.volcano.geometry import BUILTIN_GEOMETRIES
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models import gpu_catalog
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano import first_match, parse_device_config

__all__ = ["agent_kubeconfig_path"]  # fixture

MODEL = "H100-80GB-HBM3"  # vgpu_devcluster.nodes key
H100 = "NVIDIA H100 80GB HBM3"
LAYOUT = {"1g.10gb": 7}
LISTED = 24  # the review's smi13
REFUSED_WITHIN = 10.0  # seconds for the refused action, nvidia-smi reads included (was 21+)
GROWTH_MIB = 64
CONTROLS = {"\u0085": "\\x85", "\u009b": "\\x9b", "\u2028": "\\u2028"}


@dataclass
class Scene:
    api: client.ApiClient
    operator: OperatorThread
    good: GpuNode
    listed24: GpuNode
    escapes: GpuNode
    agents: dict[str, AgentProcess]
    huge: str
    h100: str
    forged: str
    static_policy: str
    huge_config: str  # its released configuration, as the policy left it before
    grown_from: float  # the process's resident MiB before the controller started

    def findings(self, rule: str) -> list[Finding]:
        volcano = self.operator.controller.volcano if self.operator.controller else None
        return [f for f in (volcano.findings or []) if f.id == rule] if volcano else []


def listing_of_24(gpus: fs.NodeState) -> None:
    """GPU 0 of `gpus` with LISTED 1g.10gb instances, each with its compute instance, at every
    legal start in turn: what a corrupted or forged `nvidia-smi mig -lgi` could print."""
    gpu = gpus["gpus"][0]
    profile = next(p for p in gpu_catalog.GPU_MODELS[gpu["model"]].profiles if p.name == "1g.10gb")
    gpu["gis"] = [
        fs.GiState(
            id=i + 1,
            profile_id=profile.id,
            start=profile.placements[i % len(profile.placements)],
            size=profile.size,
            cis=[
                fs.CiState(
                    id=0,
                    profile_id=profile.ci_profile_id,
                    start=0,
                    size=profile.slices,
                    uuid=f"MIG-listed-{i}",
                )
            ],
        )
        for i in range(LISTED)
    ]


def unreadable_config() -> str:
    """A released configuration whose MIG profile name holds the three controls (raw in the
    annotation's text: JSON allows them unescaped)."""
    profile = "1g.10gb\u0085forged line \u009b31mred\u2028more"
    config = {"mode": "mig", "mig": {"partitioning": "static", "layout": [{"gpus": "all"}]}}
    config["mig"]["layout"][0]["profiles"] = {profile: 1}  # type: ignore[index]
    return json.dumps(config, ensure_ascii=False)


@pytest.fixture(scope="module")
async def scene(
    api: client.ApiClient,
    installed: Credentials,
    agent_kubeconfig_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Scene]:
    created: list[str] = []

    async def make_nodes(
        model: str | None = MODEL, count: int = 1, *, gpus: int = 1, prefix: str = "ha", **kw: Any
    ) -> list[str]:
        base = unique(prefix)
        specs = [
            NodeSpec(name=f"{base}-{i}", model=model, gpus=gpus if model else 0, **kw)
            for i in range(count)
        ]
        created.extend(s.name for s in specs)
        return await create_gpu_nodes(api, specs)

    env = VolcanoEnv(api, make_nodes)
    agents = Agents(tmp_path_factory.mktemp("agents"), agent_kubeconfig_path, make_nodes)
    static_pool, dynamic_pool = {"test/pool": unique("static")}, {"test/pool": unique("dyn")}
    policies: list[str] = []
    operator: OperatorThread | None = None
    try:
        await env.add_control_node()
        good = await agents.node(MODEL, 1, mig=True, labels=static_pool)
        listed24 = await agents.node(MODEL, 1, mig=True, labels=static_pool)
        escapes = await agents.node(MODEL, 1, mig=True)
        with fs.edit(listed24.gpus.state) as state:
            listing_of_24(state)
        static_policy = unique("static")
        layout = [{"gpus": "all", "profiles": LAYOUT}]
        static_spec = {"mode": "mig", "mig": {"partitioning": "static", "layout": layout}}
        before = managed_node(NodeConfig.model_validate({**static_spec, "policy": static_policy}))
        [huge] = await make_nodes(
            labels={**static_pool, **before["labels"], contract.GFD_COUNT: "200000"},
            taints=tuple(before["taints"]),
            annotations=before["annotations"],
        )
        [h100] = await make_nodes(labels=dynamic_pool)
        [forged] = await make_nodes(
            labels=dynamic_pool,
            annotations={contract.ANN_INVENTORY: hostile.forged_inventory("H1")},
        )
        await env.patch(
            kubeapi.node_path(escapes.name),
            {"metadata": {"annotations": {contract.ANN_CONFIG: unreadable_config()}}},
        )
        started = {n.name: agents.start(n) for n in (good, listed24, escapes)}
        # `escapes`' agent reads the hand-written configuration before the controller starts:
        # the controller rewrites an unreadable `vgpu.volcano.sh/config` (its own key) at once.
        await asyncio.gather(
            env.install(), wait_state(api, escapes.name, "failed", started[escapes.name], 60)
        )

        grown_from = rss_mib()
        operator = OperatorThread(
            installed,
            options=ReconcilerOptions(resync_seconds=3600),
            volcano=fast_passes(),
        ).start()
        for name, spec in (
            (static_policy, static_spec),
            (unique("dynamic"), {"mode": "mig", "mig": {"partitioning": "dynamic"}}),
        ):
            pool = static_pool if name == static_policy else dynamic_pool
            await create_policy(api, name, {"nodeSelector": {"matchLabels": pool}, **spec})
            policies.append(name)
        yield Scene(
            api,
            operator,
            good,
            listed24,
            escapes,
            started,
            huge,
            h100,
            forged,
            static_policy,
            before["annotations"][contract.ANN_CONFIG],
            grown_from,
        )
    finally:
        # Agents first (before their nodes go), then the nodes, so the policies' deletion has
        # no node to release (`huge` refuses every write, `listed24`'s agent every layout), then
        # the policies while the controller runs (it releases their finalizers).
        agents.stop()
        try:
            for name in [n for n in created if n != env.control]:
                with contextlib.suppress(kubeapi.NotFound):
                    await kubeapi.request(api, "DELETE", kubeapi.node_path(name))
            for name in policies:
                with contextlib.suppress(kubeapi.NotFound):
                    await kubeapi.request(api, "DELETE", kubeapi.policy_path(name))
            for name in policies:
                await eventually(lambda name=name: gone(api, name), timeout=30)
        finally:
            if operator is not None:
                operator.stop()
            try:
                await env.teardown()
            finally:
                if env.control:
                    with contextlib.suppress(kubeapi.NotFound):
                        await kubeapi.request(api, "DELETE", kubeapi.node_path(env.control))


async def node_config(api: client.ApiClient) -> dict[str, dict[str, Any]]:
    cm = await kubeapi.request(api, "GET", configmap_path(PLUGIN_NS, NODE_CM))
    return json_entries(cm["data"]["config.json"])


async def test_200000_gpus_on_a_static_mig_node_block_no_other_nodes_entry(scene: Scene) -> None:
    api = scene.api
    await wait_state(api, scene.good.name, "success", scene.agents[scene.good.name])
    assert scene.good.layout(0) == Counter({19: LAYOUT["1g.10gb"]})
    entries: dict[str, dict[str, Any]] = {}

    async def written() -> bool:
        entries.clear()
        entries.update(await node_config(api))
        nodes = (scene.good.name, scene.listed24.name, scene.huge)
        # NVIDIA's device plugin serves a static-MIG node: its entry filters every GPU of it,
        # as the agent's inventory lists them (`good` has one)
        return set(nodes) <= set(entries) and filtered(entries[scene.good.name]) == [0]

    try:
        await eventually(written, timeout=60)
    except AssertionError:
        raise AssertionError(json.dumps(entries, indent=1)[-3000:]) from None
    # what a node whose GPUs are not known gets, not 200000 indexes
    assert filtered(entries[scene.huge]) == list(range(bounds.MAX_GPUS_PER_NODE))

    async def named() -> bool:
        status = await kubeapi.request(api, "GET", kubeapi.policy_path(scene.static_policy))
        problems = {
            (p["node"], p["reason"]) for p in (status.get("status") or {}).get("problemNodes", [])
        }
        return (scene.huge, "GpuCountOutOfBounds") in problems and any(
            scene.huge in f.message and contract.GFD_COUNT in f.message
            for f in scene.findings("node-input-bounds")
        )

    await eventually(named, timeout=30)
    huge = await get_node(api, scene.huge)
    assert huge["metadata"]["annotations"][contract.ANN_CONFIG] == scene.huge_config  # untouched
    grown = rss_mib() - scene.grown_from
    print(f"200000 GPUs on a static-MIG node: the process grew by {grown:.1f} MiB")
    assert grown < GROWTH_MIB, f"the process grew by {grown:.0f} MiB"


def filtered(entry: dict[str, Any]) -> list[int]:
    return list(entry["filterdevices"]["index"])


def log_time(line: str) -> float:
    """The time of a text log line (`logs.setup`'s asctime: 2026-11-26 02:40:00,123)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


async def test_24_listed_instances_are_refused_within_seconds_and_named(scene: Scene) -> None:
    api, node = scene.api, scene.listed24.name
    agent = scene.agents[node]
    await wait_state(api, node, "failed", agent, timeout=90)
    said = f"lists {LISTED} GPU instances, more than its 7 compute slices allow"

    async def event() -> bool:
        return any(
            e["type"] == "Warning" and said in e["message"] for e in await agent_events(api, node)
        )

    await eventually(event, timeout=30)
    lines = agent.output().splitlines()
    end = next(i for i, line in enumerate(lines) if "outcome: failed" in line and said in line)
    [start] = [i for i in range(end) if "acting (" in lines[i]][-1:]
    took = log_time(lines[end]) - log_time(lines[start])
    print(f"{LISTED} listed instances: refused {took:.2f} s after the action began")
    assert took < REFUSED_WITHIN, "\n".join(lines[start : end + 1])
    assert scene.listed24.effects("destroyed_gi") == []  # nothing planned from that listing
    # the other agent of the pool is not held up
    await wait_state(api, scene.good.name, "success", scene.agents[scene.good.name])


def shape(entry: Any) -> list[list[tuple[str, int]]]:
    return [[(t.name, t.count) for t in g.geometries] for g in entry.allowed_geometries]


async def test_a_gpu_named_h1_leaves_the_h100_geometry_as_the_catalogs(scene: Scene) -> None:
    api = scene.api
    catalog = next(e for e in BUILTIN_GEOMETRIES if "H100 80GB HBM3" in e.models)
    text: list[str] = []

    async def h100_rendered() -> bool:
        cm = await kubeapi.request(api, "GET", configmap_path(PLUGIN_NS, DEVICE_CM))
        text[:] = [cm["data"]["device-config.yaml"]]
        nvidia = parse_device_config(text[0]).nvidia
        return nvidia is not None and first_match(nvidia.geometries(), H100) is not None

    await eventually(h100_rendered, timeout=60)
    nvidia = parse_device_config(text[0]).nvidia
    assert nvidia is not None
    entry = first_match(nvidia.geometries(), H100)
    assert entry is not None and entry.models == catalog.models, entry
    # the catalog's groups (their memory as core.volcano.mig_memory lists it, not a report's)
    assert shape(entry) == shape(catalog), entry
    assert not [e.models for e in nvidia.geometries() if "H1" in e.models]

    async def named() -> bool:
        return any(
            f.objects[0].name == scene.forged and "'H1'" in f.message and H100 in f.message
            for f in scene.findings("mig-geometry-reports")
        )

    await eventually(named, timeout=30)
    assert not [
        f for f in scene.findings("mig-geometry-reports") if f.objects[0].name == scene.h100
    ]


async def test_control_characters_from_a_node_annotation_are_escaped_in_the_agents_log(
    scene: Scene,
) -> None:
    agent = scene.agents[scene.escapes.name]  # it reported `failed` (the scene waited for it)
    text = agent.output()  # the outcome is logged before it is reported (agent.loop `act`)
    line = next(ln for ln in text.split("\n") if "outcome: failed" in ln)  # retries follow
    assert contract.ANN_CONFIG in line and "String should match pattern" in line, line
    for raw, escaped in CONTROLS.items():
        assert raw not in text, f"{escaped} raw in the agent's log"
        assert escaped in line, line
