"""The README's way onto a seed's cluster ("From a hand-configured cluster"), as checks on the
local control plane: `observed` (observe mode writes nothing but its policies' status and
Events), `enforced` and `assert_undisturbed` (after enforce: no scheduler or plugin restart, no
eviction, no label or taint a person set changed, no ConfigMap whose content differs for what
reads it), `rolls` (a deliberate change passes through the nodes' `vgpu.volcano.sh/rollout`
phases, at most `maxUnavailable` at a time, counted from a watch). The seeds themselves:
tests/cluster/seedkit.py."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from tests.cluster.helpers import PolicyFactory, eventually
from tests.cluster.rolloutkit import cordoned, rollout_of, watching_nodes
from tests.cluster.seedkit import NODE_CM, NODE_KEY, Before, SeedCluster
from tests.cluster.volcano_ops import OperatorFactory, pods_created
from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.kubeapi import policy_path
from vgpu_operator.models.volcano import REGISTER_ANNOTATION, parse_node_config, parse_register

ASCEND_NODE_KEY = "node-config.yaml"  # hami-device-node-config


async def condition(api: client.ApiClient, policy: str, kind: str) -> dict[str, Any]:
    obj = await kubeapi.request(api, "GET", policy_path(policy))
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


async def observed(
    api: client.ApiClient,
    local: LocalCluster,
    start: OperatorFactory,
    config: str,
    policies: PolicyFactory,
    specs: Mapping[str, dict[str, Any]],
) -> dict[str, str]:
    """Observe mode with `config` and the policies `specs` (prefix -> spec): policy name -> its
    `Observed` message. Asserts the operator wrote nothing but its policies' status and Events
    (the audit log), then stops it."""
    offset = local.audit_offset()
    op = start(config)
    names = [await policies(prefix, spec) for prefix, spec in specs.items()]

    async def said() -> bool:
        for name in names:
            c = await condition(api, name, "Observed")
            if not c or "not read yet" in c.get("message", ""):
                return False
        return True

    await eventually(said, timeout=90, interval=0.5)
    messages = {name: (await condition(api, name, "Observed"))["message"] for name in names}
    others = [
        (e["verb"], e["objectRef"])
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["verb"] != "list"
        and e["responseStatus"]["code"] < 300
        and e["objectRef"]["resource"] != "events"
        and (e["objectRef"]["resource"], e["objectRef"].get("subresource")) not in STATUS
        # the policies' own writes beside their status: Kopf's bookkeeping annotations, and an
        # earlier test's finalizer observe needs no more (checked below: none added here)
        and e["objectRef"]["resource"] != "vgpunodepolicies"
    ]
    assert others == [], others
    for name in names:
        obj = await kubeapi.request(api, "GET", kubeapi.policy_path(name))
        assert contract.FINALIZER not in (obj["metadata"].get("finalizers") or []), name
    op.stop()
    return messages


STATUS = {("vgpunodepolicies", "status")}


async def enforced(
    api: client.ApiClient,
    start: OperatorFactory,
    config: str,
    env: SeedCluster,
    managed: Mapping[str, str],
    settled: Callable[[], Awaitable[bool]] | None = None,
) -> OperatorThread:
    """Enforce mode with `config`; returns once every node in `managed` (node -> policy) carries
    its policy and `settled` holds, after a few more configuration passes (a label edit on a
    node is watched) and past the restart settle time: a restart would be due by then."""
    op = start(config, restart_settle_seconds=1.0)

    async def labelled() -> bool:
        state = await env.node_state()
        return all(
            state[n][0].get(contract.LABEL_POLICY) == p for n, p in managed.items() if n in state
        ) and (settled is None or await settled())

    await eventually(labelled, timeout=90, interval=0.5)
    for i in range(3):
        assert op.controller is not None and op.controller.volcano is not None
        target = op.controller.volcano.passes + 1
        nudge = {"metadata": {"labels": {"test/nudge": str(i)}}}
        await kubeapi.request(
            api,
            "PATCH",
            kubeapi.node_path(env.nodes[0]),
            body=nudge,
            content_type=kubeapi.MERGE_PATCH,
        )

        async def another_pass(target: int = target) -> bool:
            return (
                op.controller is not None
                and op.controller.volcano is not None
                and (op.controller.volcano.passes >= target)
            )

        await eventually(another_pass, timeout=30, interval=0.2)
    await asyncio.sleep(3)
    return op


def read_as_consumer(key: str, value: str) -> Any:
    """A ConfigMap value as its reader parses it: JSON (config.json) or YAML (the scheduler conf,
    the device config), so a re-indented or re-ordered but equal text counts as equal."""
    return json.loads(value) if key.endswith(".json") else yaml.safe_load(value)


Reading = tuple[str, float, float, float, frozenset[str], frozenset[int]]


def node_config_reading(value: str, nodes: list[str], without: Reading) -> dict[str, Reading]:
    """What HAMi's plugin on each node reads from config.json: `without` (what it uses with no
    entry: hami-core and its flags' or defaults' values) with the positive fields of the
    node's entries over it, later entries winning (models.volcano `effective_for`). Whether the
    entry is explicit is not something it reads."""
    parsed = parse_node_config(value)
    out: dict[str, Reading] = {}
    for n in nodes:
        s = parsed.effective_for(n)
        out[n] = (
            s.mode,
            s.device_split_count or without[1],
            s.device_memory_scaling or without[2],
            s.device_core_scaling or without[3],
            s.filter_uuids,
            s.filter_indexes,
        )
    return out


def ascend_node_reading(value: str, nodes: list[str], global_core: bool) -> dict[str, Any]:
    """What HAMi's Ascend plugin reads for each node from node-config.yaml: a matched entry's
    `hami-vnpu-core` (a missing key reads as false), else the global `vnpus.hamiVnpuCore`; its
    `vDeviceCount` and `filterDevices` (Project-HAMi/ascend-device-plugin@v1.4.0:
    internal/vnpu.go `NodeConfig`, internal/manager/manager.go `IsHamiVnpuCore`)."""
    doc = yaml.safe_load(value) or {}
    entries = {str(e.get("name")): e for e in doc.get("nodes") or [] if isinstance(e, dict)}
    out = {}
    for n in nodes:
        e = entries.get(n)
        if e is None:
            out[n] = (global_core, None, {})
            continue
        filters = {k: v for k, v in (e.get("filterDevices") or {}).items() if v}
        out[n] = (e.get("hami-vnpu-core", False), e.get("vDeviceCount"), filters)
    return out


def without_entry(split: float, memory_scaling: float = 1, core_scaling: float = 1) -> Reading:
    return ("hami-core", split, memory_scaling, core_scaling, frozenset(), frozenset())


def assert_undisturbed(
    env: SeedCluster,
    local: LocalCluster,
    offset: int,
    before: Before,
    after: Before,
    *,
    plugin_defaults: Reading,
    ascend_nodes: list[str] | None = None,
) -> None:
    """What enforce did since `offset` disturbed nothing: no scheduler, plugin or GPU pod
    replaced and no operator write to a workload or pod, no eviction, no label or taint a person
    set changed (only the operator's own `vgpu.volcano.sh/` bookkeeping added), and every
    ConfigMap reads the same for its consumer: parsed YAML/JSON equal, the node config compared
    per node as the plugin reads it (explicit entries equal to what it used without one are no
    change), the Ascend node config per node as HAMi's Ascend plugin reads it.
    `plugin_defaults`: what the seed's plugin uses for a node without an entry."""
    events = [
        e
        for e in local.audit_events(offset=offset)
        if e["responseStatus"]["code"] < 300 and e["verb"] not in ("list", "get", "watch")
    ]
    touched = {
        (e["verb"], e["objectRef"]["resource"])
        for e in events
        if e["user"]["username"] == OPERATOR_USER
        and e["objectRef"]["resource"] in ("deployments", "daemonsets", "pods")
    }
    assert touched == set(), touched
    assert [e for e in events if e["objectRef"].get("subresource") == "eviction"] == []
    assert pods_created(local, offset, env.where.plugin) == 0
    assert after.plugin == before.plugin, "a plugin pod was replaced"
    assert after.scheduler == before.scheduler, "the scheduler was restarted"
    assert after.gpu_pods == before.gpu_pods
    for name, (labels, taints) in before.nodes.items():
        new_labels, new_taints = after.nodes[name]
        assert new_taints == taints, (name, taints, new_taints)
        assert {k: v for k, v in new_labels.items() if k in labels} == labels, name
        added = set(new_labels) - set(labels)
        assert all(k.startswith(contract.GROUP + "/") or k == "test/nudge" for k in added), added
    assert set(after.configmaps) == set(before.configmaps)
    for ref, data in before.configmaps.items():
        new = after.configmaps[ref]
        assert set(new) == set(data), ref
        for key, value in data.items():
            if key == NODE_KEY and ref.endswith("/" + NODE_CM):
                was = node_config_reading(value, env.nodes, plugin_defaults)
                assert node_config_reading(new[key], env.nodes, plugin_defaults) == was, ref
            elif key == ASCEND_NODE_KEY and ascend_nodes is not None:
                was_a = ascend_node_reading(value, ascend_nodes, False)
                assert ascend_node_reading(new[key], ascend_nodes, False) == was_a, ref
            else:
                assert read_as_consumer(key, new[key]) == read_as_consumer(key, value), (ref, key)


def assert_own_marks_only(node: Mapping[str, Any]) -> None:
    """The hand-set labels and taints stay the user's: not in the operator's record."""
    record = (node["metadata"].get("annotations") or {}).get(contract.ANN_OWNED, "{}")
    owned = json.loads(record)
    assert not owned.get("labels") and not owned.get("taints"), record


# -- a deliberate change -------------------------------------------------------------------


@dataclass
class Rollout:
    """What the nodes showed while a change rolled: every committed state, from a WATCH (the
    apiserver sends each change in resourceVersion order, none skipped), so `most` is exact:
    polling could miss a moment when one node's start landed before another's end."""

    nodes: list[str] = field(default_factory=list)  # the nodes watched
    most: int = 0  # nodes in transition at once (a rollout record, or cordoned)
    phases: dict[str, list[str]] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)
    busy: set[str] = field(default_factory=set)  # in transition now

    def see(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        name = obj["metadata"]["name"]
        if name not in self.nodes:
            return
        node = dict(obj)
        r = None if deleted else rollout_of(node)
        if r is not None or (not deleted and cordoned(node)):
            self.busy.add(name)
        else:
            self.busy.discard(name)
        if not deleted and cordoned(node):
            self.cordoned.add(name)
        if r is not None:
            phases = self.phases.setdefault(name, [])
            if not phases or phases[-1] != r.phase:
                phases.append(r.phase)
        self.most = max(self.most, len(self.busy))


async def rolls(
    api: client.ApiClient,
    env: SeedCluster,
    nodes: list[str],
    change: Callable[[], Awaitable[None]],
    done: Callable[[], Awaitable[bool]],
    *,
    settle: bool = True,
    timeout: float = 150,
) -> Rollout:
    """Make `change` and watch the nodes until `done` (and, with `settle`, no node is in
    transition any more)."""
    seen = Rollout(nodes=list(nodes))

    async def finished() -> bool:
        return await done() and (not settle or not seen.busy)

    async with watching_nodes(api, f"test/pool={env.pool}", seen.see, seen.busy.clear):
        await change()
        await eventually(finished, timeout=timeout, interval=0.5)
    return seen


def registering(
    api: client.ApiClient, nodes: list[str], count: int
) -> Callable[[], Awaitable[bool]]:
    """Done when every node's plugin registration gives each GPU a split count of `count`."""

    async def done() -> bool:
        for name in nodes:
            obj = await kubeapi.request(api, "GET", kubeapi.node_path(name))
            raw = (obj["metadata"].get("annotations") or {}).get(REGISTER_ANNOTATION, "")
            if {g.count for g in parse_register(raw)} != {count}:
                return False
        return True

    return done


def plugin_pods_created(local: LocalCluster, offset: int, env: SeedCluster) -> int:
    return pods_created(local, offset, env.where.plugin)


async def planned(
    kubeconfig: Path,
    config: str,
    policy: str,
    workdir: Path,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`vgpu-operator plan` as a subprocess (the README's step 2), with the operator config
    enforce runs with: of the live `policy` (`plan NAME`), or of a change to it, `spec` as its
    new spec (`plan -f FILE`)."""
    config_file = workdir / f"plan-config-{policy}.yaml"
    config_file.write_text(config)
    target = [policy]
    if spec is not None:
        doc = {
            "apiVersion": contract.API_VERSION,
            "kind": contract.POLICY_KIND,
            "metadata": {"name": policy},
            "spec": dict(spec),
        }
        policy_file = workdir / f"plan-{policy}.yaml"
        policy_file.write_text(yaml.safe_dump(doc))
        target = ["-f", str(policy_file)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vgpu_operator.commands.cli",
        "plan",
        *target,
        "--kubeconfig",
        str(kubeconfig),
        "--config",
        str(config_file),
        "-o",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode in (0, 1), err.decode()  # 1: something would change
    result: dict[str, Any] = json.loads(out)
    return result


def assert_nothing_disruptive(plan: Mapping[str, Any]) -> None:
    """The plan moves no node through a disruptive change, patches no workload and restarts
    nothing."""
    assert [n["node"] for n in plan["nodes"] if n["disruptive"]] == [], plan["nodes"]
    assert plan["workloads"] == [], plan["workloads"]
    assert plan["restarts"] == [], plan["restarts"]
