"""What the functional core's part of one rollout pass costs at N nodes, in CPU seconds, as the
controller's pass (`controller/reconciler.py`) calls it on the Nodes' facts its cache holds: the
rollout's decision over the pool (`core.rollout.decide.decide_cluster`), the node plans with the
leaves (`core.rollout.leave.plan_with_leaves`), and, in a pass that wrote, the plan of every node
again for the status, the Events and the gauges (`core.nodes.planner.plan_cluster`). Each
Node's facts (`core.nodes.facts.node_facts`) are read once per Node event by the cache, not per
pass: a row of their own. Left out: the policies' refusals (per policy, not per node). No I/O:
the world is the rollout's unit tests' (`tests/kit/rollout_world.py`), a pool of N nodes with an
agent each and one GPU pod a node, moved from `hami-core` to dynamic `mig` under
`maxUnavailable: 10%` until the first wave is in transition (the pass a rollout repeats most).

bench/rollout.py logs the operator's whole passes at the same size (`bench/operator_pace.py`:
their mean wall time, its event loop's CPU); this benchmark splits off the core's part, which a
pass spends deciding every node of the pool and which deciding only the nodes whose inputs
changed would save.

Run: `python bench/pass_cost.py [--repeat K] N` (the smoke test runs 20 nodes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the world is tests/kit's

from benchkit import machine
from importkit import commit, versions
from tests.kit.nodekit import parsed
from tests.kit.rollout_world import HAMI, MIG, World, pods, spec
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.nodes.planner import plan_cluster
from vgpu_operator.core.rollout.decide import RolloutPlan, decide_cluster
from vgpu_operator.core.rollout.leave import plan_with_leaves


def mid_rollout(n: int) -> World:
    """N nodes on `hami-core`, a GPU pod each, their policy changed to dynamic `mig`: two passes
    later the first wave is cordoned and draining."""
    world = World.pool(n)
    world.configure(HAMI)
    for name in world.nodes:
        world.pods[name] = pods(name, f"gpu-{name}")
    world.set_policy("pool", spec(MIG, maxUnavailable="10%"), generation=2)
    for _ in range(2):
        world.run()
        world.agents_apply()
        world.plugins_register()
    return world


def parts(world: World) -> dict[str, Callable[[], object]]:
    policies = parsed(world.policies)
    pods_of = {name: tuple(p) for name, p in world.pods.items()}
    facts = [node_facts(raw) for raw in world.nodes.values()]  # the cache's

    def decide() -> RolloutPlan:
        return decide_cluster(
            facts, policies, world.now, pods=pods_of, registrations=world.registrations
        )

    def plans(decision: RolloutPlan) -> object:
        return plan_with_leaves(facts, policies, steps=decision.steps, held=decision.held)

    def status() -> object:
        return plan_cluster(facts, policies)

    def whole() -> object:
        plans(decide())
        return status()

    decision = decide()
    return {
        "node_facts (per Node event, not per pass)": lambda: [
            node_facts(raw) for raw in world.nodes.values()
        ],
        "decide_cluster": decide,
        "plan_with_leaves": lambda: plans(decision),
        "plan_cluster (status, Events, gauges)": status,
        "the core's whole pass": whole,
    }


def cpu_seconds(run: Callable[[], object], repeat: int) -> float:
    """The median CPU seconds (this process's) of `repeat` calls: wall time on a busy machine
    would count other processes' turns."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("nodes", type=int)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    world = mid_rollout(args.nodes)
    moving = len(world.in_transition())
    print(f"Date {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}")
    print(f"Machine: {machine()}")
    print(f"Versions: {versions(('pydantic', 'pydantic-core'))}")
    print(f"The core's pass at {args.nodes} nodes, {moving} in transition; median of {args.repeat}")
    print()
    print("| part | CPU ms a pass | CPU µs a node |")
    print("|---|---:|---:|")
    for name, run in parts(world).items():
        seconds = cpu_seconds(run, args.repeat)
        print(f"| {name} | {1000 * seconds:.1f} | {1e6 * seconds / args.nodes:.0f} |")


if __name__ == "__main__":
    main()
