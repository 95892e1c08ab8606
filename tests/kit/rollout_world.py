"""A pure world for the rollout's unit tests: raw Nodes patched as the apiserver would, GPU pods per
node, the plugin's registration, and one pass = `decide_cluster` + `plan_cluster` + the PATCHes
+ the evictions (a PodDisruptionBudget may refuse them, as the Eviction API does with 429)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.kit.nodekit import apply, node, parsed, policy
from vgpu_operator import contract
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.step import OPERAND_LABELS
from vgpu_operator.core.rollout.decide import GpuPod, PluginReading, RolloutPlan, decide_cluster
from vgpu_operator.core.rollout.leave import plan_with_leaves
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.rollout import NodeRollout

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
POOL = {"matchLabels": {"pool": "a100"}}
HAMI = {"nodeSelector": POOL, "mode": "hami-core", "hamiCore": {"deviceSplitCount": 10}}
MIG = {"nodeSelector": POOL, "mode": "mig", "mig": {"partitioning": "dynamic"}}


def spec(base: Mapping[str, Any], **rollout: Any) -> dict[str, Any]:
    return {**base, "rollout": rollout}


def register(mode: str, count: int = 10, gpus: int = 2) -> str:
    return "".join(f"GPU-{i},{count},81920,NVIDIA-A100,true,{mode}:" for i in range(gpus))


@dataclass
class World:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, list[GpuPod]] = field(default_factory=dict)
    registrations: dict[str, str] = field(default_factory=dict)
    pdb_refuses: dict[str, str] = field(default_factory=dict)  # pod -> the 429's message
    now: datetime = T0
    policies: list[dict[str, Any]] = field(default_factory=list)
    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (node, reason, message)
    last: RolloutPlan | None = None
    # The configuration reconciler's view of the device plugin (None: it does not run): the
    # nodes a plugin pod is on, and the released configuration each node-config entry renders.
    plugin_pods: set[str] | None = None
    entries: dict[str, str] = field(default_factory=dict)
    entry_changed: dict[str, datetime] = field(default_factory=dict)  # node -> its entry's stamp

    @classmethod
    def pool(
        cls, count: int, *, agent: bool = True, operands: bool = False, prefix: str = "a100-"
    ) -> World:
        w = cls()
        for i in range(count):
            labels = {"pool": "a100"}
            if operands:
                labels.update(dict.fromkeys(OPERAND_LABELS[1:3], "true"))
            name = f"{prefix}{i}"
            w.nodes[name] = node(name, labels=labels)
            if agent:
                w.agent(name, None)
        return w

    # -- what the node's other parties do ----------------------------------------------------
    def agent(self, name: str, state: str | None, applied: NodeConfig | None = None) -> None:
        """The node agent: its inventory (with what it applied) and its state label."""
        meta = self.nodes[name]["metadata"]
        meta.setdefault("annotations", {})[contract.ANN_INVENTORY] = Inventory(
            applied=applied
        ).to_annotation()
        labels = meta.setdefault("labels", {})
        if state is None:
            labels.pop(contract.LABEL_STATE, None)
        else:
            labels[contract.LABEL_STATE] = state

    def agents_apply(self) -> None:
        """Every agent applies what is released, successfully."""
        for name in self.nodes:
            config = self.config(name)
            if config is not None and contract.ANN_INVENTORY in self.annotations(name):
                self.agent(name, "success", config)

    def plugins_register(self) -> None:
        """A plugin pod runs where the placement label is, registering the released config."""
        for name in self.nodes:
            config = self.config(name)
            if self.labels(name).get(contract.LABEL_DEVICE_PLUGIN) == "hami" and config:
                split = config.hami_core.device_split_count if config.hami_core else None
                self.registrations[name] = register(config.mode, split or 10)

    def plugin_pods_follow(self) -> None:
        """The plugin DaemonSet: its pod is on the nodes with the placement label."""
        self.plugin_pods = {
            n for n in self.nodes if self.labels(n).get(contract.LABEL_DEVICE_PLUGIN)
        }

    def entries_render(self) -> None:
        """The configuration pass: each node-config entry rewritten for the released config."""
        self.entries = {
            n: text for n in self.nodes if (text := self.annotations(n).get(contract.ANN_CONFIG))
        }

    def readings(self) -> dict[str, PluginReading] | None:
        if self.plugin_pods is None:
            return None
        return {
            n: PluginReading(
                read_at=self.now,
                running=n in self.plugin_pods,
                entry=self.entries.get(n),
                entry_changed=self.entry_changed.get(n),
            )
            for n in self.nodes
        }

    # -- reading ------------------------------------------------------------------------------
    def labels(self, name: str) -> dict[str, str]:
        return dict(self.nodes[name]["metadata"].get("labels") or {})

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.nodes[name]["metadata"].get("annotations") or {})

    def config(self, name: str) -> NodeConfig | None:
        return NodeConfig.from_annotation(self.annotations(name).get(contract.ANN_CONFIG))

    def rollout(self, name: str) -> NodeRollout | None:
        return NodeRollout.from_annotation(self.annotations(name).get(contract.ANN_ROLLOUT))

    def cordoned(self, name: str) -> bool:
        return self.nodes[name].get("spec", {}).get("unschedulable") is True

    def in_transition(self) -> list[str]:
        return sorted(n for n in self.nodes if self.rollout(n) is not None)

    def released(self, mode: str) -> list[str]:
        return sorted(n for n in self.nodes if (c := self.config(n)) and c.mode == mode)

    # -- one pass of the controller -------------------------------------------------------------
    def run(self, advance: float = 1.0) -> RolloutPlan:
        facts = [node_facts(n) for n in self.nodes.values()]
        policies = parsed(self.policies)
        plan = decide_cluster(
            facts,
            policies,
            self.now,
            pods={n: tuple(p) for n, p in self.pods.items()},
            registrations=self.registrations,
            refusals={k: v for k, v in self.pdb_refuses.items()},
            plugins=self.readings(),
        )
        cluster = plan_with_leaves(facts, policies, steps=plan.steps, held=plan.held)
        for name, p in cluster.plans.items():
            if p.patch is not None:
                self.patches.append((name, p.patch))
                self.nodes[name] = apply(self.nodes[name], p.patch)
        for step in plan.steps.values():
            if step.event is not None:
                self.events.append((step.node, step.event.reason, step.event.message))
            for key in step.evict:
                if key in self.pdb_refuses:
                    continue
                self.evicted.append(key)
                self.pods[step.node] = [p for p in self.pods[step.node] if p.key != key]
        self.now += timedelta(seconds=advance)
        self.last = plan
        return plan

    def set_policy(self, name: str, body: Mapping[str, Any], generation: int = 1) -> None:
        self.policies = [p for p in self.policies if p["metadata"]["name"] != name]
        self.policies.append(policy(name, body, generation=generation))

    def settle(self, passes: int = 50, advance: float = 1.0) -> list[list[str]]:
        """Passes until nothing changes (agents and plugins doing their part); returns the
        nodes in transition after every pass."""
        seen = []
        quiet = 0
        for _ in range(passes):
            before = json.dumps([self.nodes, self.pods], sort_keys=True, default=str)
            self.run(advance)
            self.agents_apply()
            if self.plugin_pods is not None:
                self.plugin_pods_follow()
                self.entries_render()
            self.plugins_register()
            seen.append(self.in_transition())
            same = json.dumps([self.nodes, self.pods], sort_keys=True, default=str) == before
            quiet = quiet + 1 if same else 0
            if quiet == 2:
                break
        return seen

    def configure(self, body: Mapping[str, Any], name: str = "pool") -> None:
        """A pool configured first (released at once: nothing of the operator's runs yet)."""
        self.set_policy(name, body)
        self.settle()
        assert not self.in_transition()


def pods(node: str, *names: str, empty_dir: bool = False) -> list[GpuPod]:
    return [GpuPod(key=f"team/{n}", empty_dir=empty_dir) for n in names]


def keys(steps: Iterable[str]) -> list[str]:
    return sorted(steps)
