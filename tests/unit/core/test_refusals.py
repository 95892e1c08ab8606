"""The policies as every pass plans with them (`core.refusals.refuse_policies`): `plan` and the
controller's pass, on the same cluster, hold back the same policies for the same reasons (HAMi's
plugin cannot apply a value, a key policyKeys does not list, a dra pool without the driver's
configuration, Ascend soft slicing under a Volcano that cannot schedule it), and fill
`spec.onDelete` from the same operator config."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from tests.kit.cachekit import empty_cache
from tests.kit.fakeapi import FakeApi
from tests.kit.nodekit import node, policy
from tests.kit.plan_world import LATER, PRESENT, a100_cluster, snapshot, with_scheduler
from vgpu_devcluster import upstream
from vgpu_operator import contract
from vgpu_operator.controller.cache import ConfigurationState
from vgpu_operator.controller.kept import policy_entry
from vgpu_operator.controller.policies import PolicyCache
from vgpu_operator.controller.reconciler import Reconciler, ReconcilerOptions
from vgpu_operator.core.nodes.dra_pools import DRA_REFUSED
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.policy_keys import KEY_NOT_LISTED
from vgpu_operator.core.nodes.validate import REFUSED_REASON, parse_policy
from vgpu_operator.core.plan import plan
from vgpu_operator.core.refusals import refusal_scheduler, refuse_policies
from vgpu_operator.core.volcano.plugin_refusal import snapshot_plugin_values
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.core.volcano.soft_slicing import SOFT_SLICING_REFUSED
from vgpu_operator.kubeapi.watch import Listing
from vgpu_operator.models.policy_keys import PolicyKeys

# the chart's default (charts/vgpu-operator/values.yaml config.policyKeys)
CHART = PolicyKeys(labels=["volcano.sh/", "ascend"], taints=["volcano.sh/", "vgpu.volcano.sh/"])
NONE = {"matchLabels": {"pool": "none"}}  # selects no node: nothing is written either way
RAWS = [
    policy(
        "split", {"nodeSelector": NONE, "mode": "hami-core", "hamiCore": {"deviceSplitCount": 5}}
    ),
    policy(
        "keys",
        {
            "nodeSelector": NONE,
            "mode": "hami-core",
            "nodeTaints": [{"key": "example.com/gpu-pool", "value": "x", "effect": "NoSchedule"}],
        },
    ),
    policy("dra", {"nodeSelector": NONE, "mode": "dra", "dra": {"devices": "whole-gpu"}}),
    policy("fine", {"nodeSelector": NONE, "mode": "hami-core"}),
]
REFUSED_NOTE = re.compile(r"policy (\S+): the change is refused \(its nodes are held\): (.*)")


def v11_cluster() -> ClusterSnapshot:
    """Two A100 nodes, HAMi's v1.11.0 manifest (its plugin registers every GPU with its flags'
    split count), the chart's policyKeys and no `dra` section in the operator config."""
    s = snapshot([node(f"a100-{i}", PRESENT) for i in range(2)])
    plugin = [d for d in upstream.hami_vgpu_documents("v1.11.0") if d["kind"] == "DaemonSet"]
    others = [d for d in s.daemonsets if d["metadata"]["name"] != "volcano-device-plugin"]
    config = s.config.model_copy(update={"policy_keys": CHART, "dra": None})
    return replace(s, config=config, daemonsets=[*others, *plugin])


async def reconcilers_refusals(
    s: ClusterSnapshot,
    raws: list[dict[str, Any]],
    configuration: ConfigurationState | None = None,
) -> dict[str, tuple[str, str]]:
    """policy -> (reason, message) of the Warning Events one controller pass posts for `raws`
    (`controller_pass`)."""
    return (await controller_pass(s, raws, configuration))[1]


async def controller_pass(
    s: ClusterSnapshot,
    raws: list[dict[str, Any]],
    configuration: ConfigurationState | None = None,
) -> tuple[Reconciler, dict[str, tuple[str, str]]]:
    """One controller pass for `raws`, its cache holding the nodes and DaemonSets of `s` as the
    informers keep them, and `configuration` what the configuration reconciler published (None:
    none runs): the reconciler, and policy -> (reason, message) of the Warning Events posted."""
    cache = empty_cache(s.config, daemonsets=True)
    assert cache.daemonsets is not None
    await cache.nodes._listed(Listing(s.nodes, "1"))
    await cache.daemonsets._listed(Listing(s.daemonsets, "1"))
    cache.policies = PolicyCache({str(r["metadata"]["name"]): [policy_entry(r)] for r in raws})
    events: list[tuple[str, str, str]] = []

    def post(ref: Any, type_: str, reason: str, message: str) -> None:
        if ref["kind"] == "VGPUNodePolicy" and type_ == "Warning":
            events.append((ref["metadata"]["name"], reason, message))

    r = Reconciler(
        api=None,  # type: ignore[arg-type]  # every request goes to the FakeApi
        cache=cache,
        post_event=post,
        options=ReconcilerOptions(resync_seconds=3600, status_interval=0.0),
        configuration=configuration,
    )
    await r.reconcile(full=True, only=set())
    by_policy = {name: (reason, message) for name, reason, message in events}
    assert len(by_policy) == len(events), events  # one Warning per refused policy
    return r, by_policy


async def test_plan_and_the_controller_refuse_the_same_policies_for_the_same_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi().install(monkeypatch)
    s = v11_cluster()
    composed = refuse_policies(
        map(parse_policy, RAWS),
        s.config,
        snapshot_plugin_values(s),
        nodes=[node_facts(n) for n in s.nodes],
        scheduler=refusal_scheduler(s),
    )
    expected = {
        p.name: (p.refused[0].reason, "; ".join(x.describe() for x in p.refused))
        for p in composed
        if p.refused
    }
    assert sorted(expected) == ["dra", "keys", "split"]  # "fine" is not refused
    reasons = {x.reason for p in composed for x in p.refused}
    assert {REFUSED_REASON, KEY_NOT_LISTED, DRA_REFUSED} <= reasons

    planned = plan(s, [parse_policy(r) for r in RAWS], LATER)
    noted = {m[1]: m[2] for n in planned.notes if (m := REFUSED_NOTE.fullmatch(n))}
    assert noted == {name: message for name, (_, message) in expected.items()}

    assert await reconcilers_refusals(s, RAWS) == expected
    assert api.bodies("PATCH", r"/api/v1/nodes/.*") == []  # every policy held or selecting none


def test_plan_fills_on_delete_from_the_operator_config_as_the_controller_does() -> None:
    steady, live = a100_cluster()
    retain = replace(steady, config=steady.config.model_copy(update={"on_delete": "Retain"}))
    deleting = parse_policy(policy("a100-pool", live["spec"], deleting=True))
    [as_planned] = refuse_policies([deleting], retain.config, None, nodes=(), scheduler=None)
    assert as_planned.policy is not None and as_planned.policy.spec.on_delete == "Retain"

    def changes(s: ClusterSnapshot, spec: dict[str, Any]) -> list[tuple[str, str, Any]]:
        raw = policy("a100-pool", spec, deleting=True)
        return [(c.node, c.action, c.patch) for c in plan(s, [parse_policy(raw)], LATER).nodes]

    by_config = changes(retain, live["spec"])
    assert by_config == changes(steady, {**live["spec"], "onDelete": "Retain"})
    assert by_config != changes(steady, live["spec"])  # the default, Delete, releases the nodes


async def test_plan_and_the_controller_refuse_soft_slicing_on_volcano_1_15_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An Ascend pool with `hamiVnpuCore: true` on arm64 nodes under Volcano v1.15.1 (the
    install manifests'): `plan` refuses it from its snapshot, the controller from the snapshot
    its configuration reconciler published; before any configuration pass the scheduler's
    version is not known: the pool waits, refused for nothing yet and its node unwritten
    (tests/unit/controller/test_soft_slicing_wait.py)."""
    api = FakeApi().install(monkeypatch)
    labels = {contract.ASCEND_CHIP_LABEL: "910B3", "pool": "npu", "kubernetes.io/arch": "arm64"}
    s = snapshot([node("npu-0", labels, gpu="cpu")], ascend=True)
    raw = policy(
        "npu",
        {
            "nodeSelector": {"matchLabels": {"pool": "npu"}},
            "mode": "ascend-vnpu",
            "ascendVnpu": {"hamiVnpuCore": True},
        },
    )
    planned = plan(s, [parse_policy(raw)], LATER)
    noted = {m[1]: m[2] for n in planned.notes if (m := REFUSED_NOTE.fullmatch(n))}
    assert list(noted) == ["npu"] and "Volcano v1.15.1" in noted["npu"]
    assert not [n for n in planned.nodes if n.patch is not None]  # held: npu-0 is not taken

    r, refused = await controller_pass(s, [raw], ConfigurationState(snapshot=s))
    assert refused == {"npu": (SOFT_SLICING_REFUSED, noted["npu"])}
    assert api.bodies("PATCH", r"/api/v1/nodes/.*") == []
    assert await reconcilers_refusals(s, [raw], ConfigurationState()) == {}  # no pass yet
    assert api.bodies("PATCH", r"/api/v1/nodes/.*") == []  # it waits: npu-0 is not taken

    # Volcano upgraded: the configuration pass that reads it asks for a full pass, and the
    # policy is planned again (plan agrees)
    upgraded = with_scheduler(s, "v1.16.0")
    assert not r.configuration_published(s)  # the same scheduler: nothing to plan again
    assert r.configuration_published(upgraded)
    later = plan(upgraded, [parse_policy(raw)], LATER)
    assert not [n for n in later.notes if REFUSED_NOTE.fullmatch(n)]
    assert [n.node for n in later.nodes if n.enters] == ["npu-0"]
