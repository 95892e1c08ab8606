"""How much does a MIG change disrupt an 8-GPU node: our agent versus mig-parted.

Both sides run against the same fake nvidia-smi (vgpu_devcluster.fakesmi) on identical
8 x A100-SXM4-80GB nodes, and both are counted from the fake's call log: GPU resets, GPU and
compute instances destroyed. Both sides must end with the same instances on every GPU. Nothing
else holds the GPUs here, so nvidia-smi switches a GPU's MIG mode at once by resetting that GPU
itself (MIG user guide: "the driver will attempt to reset the GPU"), counted as a reset; with a
client holding a GPU the mode stays pending and only then does the `nvidia-smi -r` of either side
run (the agent's of that GPU, mig-parted's of every GPU).

- agent: `vgpu_operator.agent.apply.reconcile_gpus`, as it runs on a node (MEASURED).
- mig-parted: MODELLED, not measured. Its `apply` as its code does it
  (NVIDIA/mig-parted@v0.15.0:cmd/nvidia-mig-parted/apply/mode.go and config.go,
  cmd/nvidia-mig-parted/util/device.go `nvmlResetAllGPUs`, pkg/mig/config/config.go
  `SetMigConfig`), replayed as nvidia-smi calls: if any GPU's MIG mode differs, every targeted
  MIG-enabled GPU is cleared (all CIs, then all GIs), the mode is set, and when a mode is pending
  every GPU of the node is reset with one `nvidia-smi -r -i <all bus ids>`; then every GPU whose
  {profile: count} differs is cleared and recreated largest first without placements, the next
  ordering after a failure.

Scenarios (one GPU changes, seven stay as they are):
  A. GPU 3's layout changes: {3g.40gb, 2g.20gb, 2 x 1g.10gb} -> {3g.40gb, 4 x 1g.10gb}
  B. GPU 7 goes from a whole GPU (MIG off) to the layout the others have.

Run: `python bench/mig_disruption.py [--gpus G]` (about a minute; prints the table and the
ratios). `--gpus` (default 8, at least 2) sizes the node; GPU min(3, G - 1) changes its layout in
A and the last GPU turns MIG on in B (the smoke test runs 2 GPUs).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.agent.apply import reconcile_gpus
from vgpu_operator.agent.smi import NvidiaSmi, SmiError
from vgpu_operator.models.gpu_catalog import MIG_MODELS
from vgpu_operator.models.node import NodeConfig

MODEL = "A100-SXM4-80GB"
GPUS = 8
BASE = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
CHANGED = {"3g.40gb": 1, "1g.10gb": 4}


def static(*layouts: dict[str, Any]) -> NodeConfig:
    data = {"mode": "mig", "mig": {"partitioning": "static", "layout": list(layouts)}}
    return NodeConfig.model_validate(data)


@dataclass(frozen=True)
class Counts:
    resets: int
    gis_destroyed: int
    cis_destroyed: int


def counted(state: Path, since: int) -> Counts:
    log = fs.read_log(state)[since:]

    def total(effect: str) -> int:
        return sum(len(e.get("effects", {}).get(effect, [])) for e in log)

    return Counts(total("reset"), total("destroyed_gi"), total("destroyed_ci"))


async def mig_parted_apply(driver: NvidiaSmi, desired: dict[int, dict[str, int] | None]) -> None:
    """mig-parted `apply` as its code does it (NVIDIA/mig-parted@v0.15.0:cmd/nvidia-mig-parted/
    apply/). `desired[i]`: a layout, or None for MIG off."""
    rows = await driver.query_gpus()
    model = MIG_MODELS[MODEL]
    mode_mismatch = any(r.mig_current != (desired[r.index] is not None) for r in rows)
    if mode_mismatch:
        pending = False
        for r in rows:  # every targeted GPU, not just the mismatching ones
            if r.mig_current:
                await _clear(driver, r.index)
            await driver.set_mig_mode(r.index, desired[r.index] is not None)
            (after,) = await driver.query_gpus(r.index)
            pending |= after.mig_current != after.mig_pending
        if pending:  # one reset of every GPU on the node
            await driver.run("-r", "-i", ",".join(r.bus_id for r in rows), check=False)
    for r in rows:
        want = desired[r.index]
        if want is None:
            continue
        have: dict[str, int] = {}
        for gi in await driver.list_gis(r.index):
            have[gi.name] = have.get(gi.name, 0) + 1
        if have == want:
            continue
        flat = sorted(
            (p for name, n in want.items() for p in [model.profile(name)] * n if p is not None),
            key=lambda p: (-p.slices, -p.size),
        )
        for order in dict.fromkeys(itertools.permutations(flat)):  # distinct orderings
            await _clear(driver, r.index)
            try:
                for p in order:
                    await driver.run("mig", "-i", str(r.index), "-cgi", str(p.id), "-C")
                break
            except SmiError:
                continue


async def _clear(driver: NvidiaSmi, index: int) -> None:
    for gi in await driver.list_gis(index):
        await driver.destroy_ci(index, gi.gi)
        await driver.destroy_gi(index, gi.gi)


async def scenario(
    workdir: Path, name: str, before: NodeConfig, after: NodeConfig, layouts: dict[int, Any]
) -> tuple[Counts, Counts]:
    """(agent, mig-parted) counts for one change on two identical nodes: one fresh node is set
    up by the agent to `before`, and each side starts from a copy of its state. Its files are
    under `workdir/name`: scenarios run at once, each on its own fake nodes."""
    workdir = workdir / name
    workdir.mkdir()
    binary = fs.write_wrapper(workdir)
    start = workdir / f"{name}-start.json"
    fs.init_state(start, MODEL, len(layouts), node=name)
    setup = await reconcile_gpus(
        NvidiaSmi(str(binary), env={fs.ENV_STATE: str(start)}), before, None
    )
    if setup.state != "success":
        raise SystemExit(f"setup failed: {setup.message}")
    results = []
    finals: list[list[list[int]]] = []
    for side in ("agent", "mig-parted"):
        state = workdir / f"{name}-{side}.json"
        shutil.copyfile(start, state)  # the state only: the side's call log starts empty
        driver = NvidiaSmi(str(binary), env={fs.ENV_STATE: str(state)})
        since = len(fs.read_log(state))
        if side == "agent":
            out = await reconcile_gpus(driver, after, before)
            if out.state != "success":
                raise SystemExit(f"agent failed: {out.message}")
        else:
            await mig_parted_apply(driver, layouts)
        results.append(counted(state, since))
        finals.append([sorted(gi["profile_id"] for gi in g["gis"]) for g in fs.load(state)["gpus"]])
    if finals[0] != finals[1]:  # both sides must end with the same hardware
        raise SystemExit(f"{name}: the two sides ended differently: {finals}")
    return results[0], results[1]


def ratio(ours: int, theirs: int) -> str:
    if ours == 0:
        return "none needed" if theirs == 0 else f"{theirs} vs none"
    return f"{theirs / ours:.1f}x"


async def main(gpus: int = GPUS) -> int:
    changed, last = min(3, gpus - 1), gpus - 1
    a_before = static({"gpus": "all", "profiles": BASE})
    a_after = static({"gpus": "all", "profiles": BASE}, {"gpus": [changed], "profiles": CHANGED})
    a_layouts: dict[int, Any] = {i: (CHANGED if i == changed else BASE) for i in range(gpus)}
    b_before = static({"gpus": list(range(last)), "profiles": BASE})
    b_after = static({"gpus": "all", "profiles": BASE})
    b_layouts: dict[int, Any] = dict.fromkeys(range(gpus), BASE)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        a, b = await asyncio.gather(
            scenario(work, "layout", a_before, a_after, a_layouts),
            scenario(work, "mode", b_before, b_after, b_layouts),
        )
    print(f"MIG disruption, {gpus} x {MODEL}, one GPU changes (counted from the fake's call log)")
    print(f"{'scenario':<30}{'metric':<29}{'agent':>6}{'mig-parted*':>13}  ratio")
    rows = [
        (f"A: GPU {changed} changes its layout", a),
        (f"B: GPU {last} turns MIG on", b),
    ]
    for title, (ours, theirs) in rows:
        for label, x, y in (
            ("GPU resets", ours.resets, theirs.resets),
            ("GPU instances destroyed", ours.gis_destroyed, theirs.gis_destroyed),
            ("compute instances destroyed", ours.cis_destroyed, theirs.cis_destroyed),
        ):
            print(f"{title:<30}{label:<29}{x:>6}{y:>13}  {ratio(x, y)}")
            title = ""
    print(
        "* mig-parted is MODELLED, not measured: its apply algorithm "
        "(NVIDIA/mig-parted@v0.15.0:cmd/nvidia-mig-parted/apply/: clear every targeted GPU on a "
        "mode change, reset all GPUs with one "
        "`nvidia-smi -r`, clear-and-recreate any GPU whose counts differ) replayed against the "
        "same fake."
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--gpus", type=int, default=GPUS, help=f"GPUs of the node (default {GPUS})")
    args = parser.parse_args()
    if args.gpus < 2:
        parser.error("--gpus must be at least 2 (one GPU changes, the others stay)")
    sys.exit(asyncio.run(main(args.gpus)))
