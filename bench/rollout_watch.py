"""What bench/rollout.py times: every node's transition as the apiserver commits it.

One list-then-watch of the group's Nodes and one of its pods, both opened before the run starts,
give each node's timeline (seconds from the run's start, when the watch delivered the state):
- `started`: its first state with a `vgpu.volcano.sh/rollout` record or a cordon;
- `phases`: when each phase of its record (models.rollout: Draining, Pausing, Applying,
  Verifying) was first seen;
- `released`: when its `vgpu.volcano.sh/config` first differed from the configuration it had
  when the run began; `agent_done`: when, after that, the node agent first reported `success`
  with that configuration's hardware applied (core.rollout.arrive.hardware_applied, the test the
  rollout itself makes);
- `evicted`: when its GPU pod was first seen terminating; `pod_gone`: when it was deleted;
- `ended`: its first state after `started` with neither a record nor a cordon.

The same watches time the operator's run and the floor's, so both are read alike; the watcher is
the benchmark's admin client, reading raw JSON (no models but the two annotations it parses).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_operator import contract, kubeapi
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.rollout.arrive import hardware_applied
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.rollout import PHASES, NodeRollout

STEPS = tuple(p for p in PHASES if p != "Failed")


@dataclass
class Timeline:
    started: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    released: float | None = None
    agent_done: float | None = None
    evicted: float | None = None
    pod_gone: float | None = None
    ended: float | None = None
    failed: str = ""  # the reason of a Failed record

    def steps(self) -> dict[str, float]:
        """Seconds in each phase (to the next phase seen, or the end)."""
        seen = sorted((t, p) for p, t in self.phases.items() if p in STEPS)
        out: dict[str, float] = {}
        for i, (t, p) in enumerate(seen):
            nxt = seen[i + 1][0] if i + 1 < len(seen) else self.ended
            if nxt is not None:
                out[p] = nxt - t
        return out

    @property
    def total(self) -> float | None:
        if self.started is None or self.ended is None:
            return None
        return self.ended - self.started

    @property
    def pod_wait(self) -> float:
        """From the eviction seen to the pod gone: the pod's termination (kwok's)."""
        if self.evicted is None or self.pod_gone is None:
            return 0.0
        return max(0.0, self.pod_gone - self.evicted)

    @property
    def agent(self) -> float:
        """From the release to the agent's report: the node agent's apply."""
        if self.released is None or self.agent_done is None:
            return 0.0
        return max(0.0, self.agent_done - self.released)

    @property
    def own(self) -> float | None:
        """The writer's share: the node's transition less what it waited on others for (the
        pod's termination and the agent's apply)."""
        total = self.total
        return None if total is None else max(0.0, total - self.pod_wait - self.agent)


def _config_text(obj: Mapping[str, Any]) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(contract.ANN_CONFIG) or None


def _moving(obj: Mapping[str, Any]) -> bool:
    annotations = obj["metadata"].get("annotations") or {}
    return contract.ANN_ROLLOUT in annotations or bool((obj.get("spec") or {}).get("unschedulable"))


@dataclass
class GroupWatch:
    """Timelines of the nodes `nodes` (listed by `selector`) and their pods in `namespace`
    (pod name `gpu-<node>`), from `begin()` on."""

    api: Any
    selector: str
    namespace: str
    nodes: list[str]
    t0: float | None = None  # when the run began (monotonic); None: not yet
    timelines: dict[str, Timeline] = field(default_factory=dict)
    before: dict[str, str | None] = field(default_factory=dict)  # node -> config at the start
    taints: dict[str, list[Any]] = field(default_factory=dict)  # node -> its taints, as last seen
    _tick: asyncio.Future[None] | None = None  # resolved at the next change seen

    def __post_init__(self) -> None:
        self.timelines = {n: Timeline() for n in self.nodes}

    def begin(self) -> None:
        """The run starts now: the configurations seen so far are the ones it starts from."""
        self.t0 = time.monotonic()
        self.timelines = {n: Timeline() for n in self.nodes}

    @property
    def now(self) -> float:
        return time.monotonic() - (self.t0 or time.monotonic())

    def ended(self) -> int:
        return sum(1 for tl in self.timelines.values() if tl.ended is not None)

    def see_node(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        name = obj["metadata"]["name"]
        tl = self.timelines.get(name)
        if tl is None or deleted:
            return
        self.taints[name] = list((obj.get("spec") or {}).get("taints") or [])
        text = _config_text(obj)
        if self.t0 is None:  # before the run: the starting configuration
            self.before[name] = text
            return
        now = self.now
        moving = _moving(obj)
        if moving and tl.started is None:
            tl.started = now
        raw = (obj["metadata"].get("annotations") or {}).get(contract.ANN_ROLLOUT)
        record = NodeRollout.from_annotation(raw) if raw else None
        if record is not None:
            tl.phases.setdefault(record.phase, now)
            if record.failed:
                tl.failed = record.reason
        if tl.released is None and text != self.before.get(name):
            tl.released = now
        if tl.released is not None and tl.agent_done is None and text is not None:
            labels = obj["metadata"].get("labels") or {}
            config = NodeConfig.from_annotation(text)
            if (
                labels.get(contract.LABEL_STATE) == "success"
                and config is not None
                and hardware_applied(node_facts(dict(obj)), config)
            ):
                tl.agent_done = now
        if tl.started is not None and tl.ended is None and not moving:
            tl.ended = now
        self._notify()

    def see_pod(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        node = str(obj["metadata"]["name"]).removeprefix("gpu-")
        tl = self.timelines.get(node)
        if tl is None or self.t0 is None:
            return
        if obj["metadata"].get("deletionTimestamp") and tl.evicted is None:
            tl.evicted = self.now
        if deleted and tl.pod_gone is None:
            tl.pod_gone = self.now
            if tl.evicted is None:
                tl.evicted = tl.pod_gone
        self._notify()

    def _notify(self) -> None:
        tick, self._tick = self._tick, asyncio.get_running_loop().create_future()
        if tick is not None and not tick.done():
            tick.set_result(None)

    async def until(self, check: Any, seconds: float | None = None) -> bool:
        """Until `check()` holds on what the watches have seen (False after `seconds`)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            if self._tick is None:
                self._tick = asyncio.get_running_loop().create_future()
            tick = self._tick
            if check():
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(tick), left)

    async def until_ended(self, progress: Any) -> float:
        """Seconds from `begin()` until every node has ended its transition."""
        n = len(self.nodes)
        while not await self.until(lambda: self.ended() >= n, 5):
            failed = [f"{k}: {t.failed}" for k, t in self.timelines.items() if t.failed]
            done = self.ended()
            progress(f"nodes through their transition: {done}/{n} (failed: {failed[:3] or 0})")
        return max(t.ended or 0.0 for t in self.timelines.values())

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[GroupWatch]:
        """Both watches, open (their first listings seen) for the block."""
        nodes_in, pods_in = asyncio.Event(), asyncio.Event()

        async def follow(path: str, options: kubeapi.WatchOptions, see: Any, ready: Any) -> None:
            async for update in kubeapi.list_watch(self.api, path, options):
                if isinstance(update, kubeapi.Listing):
                    for obj in update.items:
                        see(obj)
                    ready.set()
                else:
                    see(update.obj, update.type == "DELETED")

        tasks = [
            asyncio.create_task(
                follow(
                    kubeapi.node_path(),
                    kubeapi.WatchOptions(label_selector=self.selector, kind="bench-nodes"),
                    self.see_node,
                    nodes_in,
                )
            ),
            asyncio.create_task(
                follow(
                    f"/api/v1/namespaces/{self.namespace}/pods",
                    kubeapi.WatchOptions(label_selector=self.selector, kind="bench-pods"),
                    self.see_pod,
                    pods_in,
                )
            ),
        ]
        try:
            await asyncio.wait_for(asyncio.gather(nodes_in.wait(), pods_in.wait()), 60)
            yield self
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of `values`; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


@dataclass(frozen=True)
class Spread:
    median: float
    p90: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(quantile(values, 0.5), quantile(values, 0.9))

    def text(self) -> str:
        return f"{self.median:.1f}/{self.p90:.1f}"


@dataclass(frozen=True)
class RunStats:
    """One side's run over a group: the table's numbers."""

    seconds: float
    nodes: int
    steps: dict[str, Spread]  # phase -> seconds (median, p90) over the nodes that had it
    node_total: Spread
    pod_wait: Spread
    agent: Spread
    own: Spread
    own_share: float  # the writer's share of the nodes' transition time, summed over nodes
    failed: int

    @property
    def per_minute(self) -> float:
        return 60.0 * self.nodes / self.seconds if self.seconds > 0 else 0.0

    @classmethod
    def of(cls, seconds: float, timelines: Mapping[str, Timeline]) -> RunStats:
        tls = list(timelines.values())
        steps: dict[str, list[float]] = {}
        for tl in tls:
            for p, s in tl.steps().items():
                steps.setdefault(p, []).append(s)
        totals = [t for tl in tls if (t := tl.total) is not None]
        owns = [o for tl in tls if (o := tl.own) is not None]
        return cls(
            seconds=seconds,
            nodes=len(tls),
            steps={p: Spread.of(v) for p, v in steps.items()},
            node_total=Spread.of(totals),
            pod_wait=Spread.of([tl.pod_wait for tl in tls]),
            agent=Spread.of([tl.agent for tl in tls]),
            own=Spread.of(owns),
            own_share=sum(owns) / sum(totals) if sum(totals) > 0 else 0.0,
            failed=sum(1 for tl in tls if tl.failed),
        )
