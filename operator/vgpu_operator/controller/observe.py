"""`mode: observe`: report, per object, what `enforce` would write, restart or reconfigure.

The reconciler hands over its cluster plan (`nodes`) instead of writing the nodes; the
configuration pass hands over its snapshot (`configuration`), planned here as `enforce` would
(`core.plan.plan` with the operator config's mode set to enforce). Each object enforce would
change gets one Event (`WouldWrite`, `WouldRestart`, `WouldBlock`; Normal, posted again only
when what would change changes) and a log line; each policy gets the `Observed` condition
(`core.observe.observed_condition`). Nothing else is written
(docs/from-a-hand-configured-cluster.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.core.nodes.facts import NodeFacts
from vgpu_operator.core.nodes.planner import ClusterPlan
from vgpu_operator.core.nodes.validate import ParsedPolicy
from vgpu_operator.core.observe import (
    CONDITION,
    ConditionValue,
    WouldDo,
    configuration_would_do,
    disruptive,
    node_would_do,
    observed_condition,
)
from vgpu_operator.core.plan import plan
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, meta

log = logging.getLogger("vgpu_operator.observe")

EventPoster = Callable[[Mapping[str, Any], str, str, str], None]

__all__ = ["CONDITION", "Observer"]

MAX_EVENTS = 100  # Events posted per pass (a large cluster's first pass has one per node)


@dataclass
class Observer:
    post_event: EventPoster
    node_uid: Callable[[str], str] = lambda _name: ""
    settle_seconds: float = 5.0
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    _nodes: list[WouldDo] = field(default_factory=list)
    _configuration: list[WouldDo] | None = None
    _posted: set[WouldDo] = field(default_factory=set)
    _uids: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def nodes(self, cluster: ClusterPlan, facts: Mapping[str, NodeFacts]) -> None:
        """The reconciler's plan of every node: what enforce would write to each."""
        self._nodes = node_would_do(cluster, facts)
        self._report(self._nodes, "Node")

    def configuration(
        self,
        snapshot: ClusterSnapshot,
        policies: Iterable[ParsedPolicy],
    ) -> bool:
        """A configuration pass's snapshot, planned as enforce would. True: what would change
        is not what it was (the policies' status is then due)."""
        as_enforce = replace(
            snapshot, config=snapshot.config.model_copy(update={"mode": "enforce"})
        )
        would = plan(as_enforce, policies, self.now(), settle_seconds=self.settle_seconds)
        found = configuration_would_do(would)
        changed = found != self._configuration
        self._configuration = found
        self._uids = _uids(snapshot)
        self._report(found, None)
        return changed

    def condition(self, policy: str) -> ConditionValue:
        return observed_condition(policy, self._nodes, self._configuration)

    def _report(self, found: list[WouldDo], kind: str | None) -> None:
        current = set(found)
        look_first = set(disruptive(found))  # restarts, refusals, taints, cordons: a warning
        new = sorted(current - self._posted)
        later = new[MAX_EVENTS:]
        current.difference_update(later)  # reported on the passes that follow
        if later:
            log.info("observe: %d more changes, reported on the next passes", len(later))
        for w in new[:MAX_EVENTS]:
            level = logging.WARNING if w in look_first else logging.INFO
            log.log(level, "observe: enforce would %s %s", w.verb, w.line() + _due(w))
            key = (w.kind, w.namespace, w.name)
            uid = self.node_uid(w.name) if w.kind == "Node" else self._uids.get(key, "")
            ref = kubeapi.object_ref(w.kind, w.name, namespace=w.namespace or None, uid=uid)
            if uid or w.kind == "Node":  # (an object enforce would create has none yet)
                self.post_event(ref, "Normal", w.reason, f"observe mode: enforce would {w.message}")
        # forget what no longer would happen (of this side), so it is posted if it comes back
        keep = {w for w in self._posted if (w.kind == "Node") != (kind == "Node")}
        self._posted = keep | current


def _due(w: WouldDo) -> str:
    return f" (due {w.due:%Y-%m-%dT%H:%M:%SZ})" if w.due is not None else ""


def _uids(s: ClusterSnapshot) -> dict[tuple[str, str, str], str]:
    """(kind, namespace, name) -> uid of the objects a configuration change concerns."""
    out: dict[tuple[str, str, str], str] = {}
    kinds = (
        ("ConfigMap", s.configmaps),
        ("Deployment", s.deployments),
        ("DaemonSet", s.daemonsets),
        ("Pod", s.pods),
    )
    for kind, items in kinds:
        for obj in items:
            m = meta(obj)
            out[(kind, str(m.get("namespace") or ""), str(m.get("name")))] = str(m.get("uid") or "")
    return out
