"""From a released NodeConfig to a target per GPU, with layout validation.

Errors name the field path the user wrote (`spec.mig.layout[0].profiles["1g.10gb"]`), what is
wrong on which GPUs, and the fix. The controller can call `validate` with the inventory the agent
reported; the agent's planner (core.mig.partition) calls `resolve_targets`. Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vgpu_operator.core.mig.place import Geometry, expand, geometry_of_gpu, solve
from vgpu_operator.models.gpu_catalog import model_for_name
from vgpu_operator.models.gpu_catalog_unconfirmed import (
    static_refusal_fix,
    static_refusal_for_gpu,
)
from vgpu_operator.models.inventory import GpuInfo, Inventory
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.policy_modes import MigLayout, MigSpec

_EXCLUDE_FIX = (
    "use mode hami-core or whole-gpu for this node, or keep the node out of this policy "
    "(its nodeSelector, or the label vgpu.volcano.sh/exclude=true)"
)


# The kind of a LayoutError that refuses a static layout on a GPU model the catalog does not
# confirm (the agent reports it under its own reason).
UNCONFIRMED = "unconfirmed-model"


@dataclass(frozen=True)
class LayoutError:
    path: str
    message: str
    fix: str
    kind: str = ""  # "" or UNCONFIRMED

    def __str__(self) -> str:
        return f"{self.path}: {self.message}. Fix: {self.fix}"


@dataclass(frozen=True)
class GpuTarget:
    """What one GPU should be. `mig=None` leaves the mode alone; `profiles=None` leaves the
    instances alone (dynamic: the device plugin owns them); `clear` removes every instance."""

    index: int
    mig: bool | None
    profiles: dict[str, int] | None = None
    clear: bool = False
    source: str = ""


def effective_mig(config: NodeConfig | None) -> MigSpec | None:
    """The MIG settings of a configuration (`NodeConfig.gpu_mig`): `mig` mode without a block
    means dynamic; a dra node's static layout or dynamic MIG; None: MIG off."""
    return config.gpu_mig if config is not None else None


def switching_into_dynamic(desired: NodeConfig | None, previous: NodeConfig | None) -> bool:
    """True when `desired` is dynamic MIG and the last applied configuration was not. Nothing
    applied (`previous` None: no agent configured the node yet, e.g. MIG turned on by hand for
    HAMi's dynamic MIG) is no switch: the instances there may be the device plugin's, in use."""
    mig = effective_mig(desired)
    if mig is None or mig.partitioning != "dynamic" or previous is None:
        return False
    before = effective_mig(previous)
    return before is None or before.partitioning != "dynamic"


def validate(config: NodeConfig, inventory: Inventory) -> list[LayoutError]:
    """Problems of `config` on the node `inventory` describes (empty: it can be applied)."""
    return resolve_targets(inventory, config, None)[1]


def resolve_targets(
    inv: Inventory, desired: NodeConfig | None, previous: NodeConfig | None
) -> tuple[list[GpuTarget], list[LayoutError], list[str]]:
    """(targets, errors, notes) for every GPU of the node."""
    if desired is None:
        return [], [], ["no configuration released to the node; GPUs left as they are"]
    if desired.mode == "ascend-vnpu":  # NVIDIA GPUs are not ours to change
        return [], [], [f"mode {desired.mode} does not touch NVIDIA GPUs"]
    mig = effective_mig(desired)
    if mig is None:  # hami-core, whole-gpu, dra with whole GPUs: MIG off
        targets = [
            GpuTarget(g.index, mig=False, clear=True, source="spec.mode")
            for g in inv.gpus
            if g.mig_capable
        ]
        return targets, [], []
    if mig.partitioning == "dynamic":
        errors = _not_capable(inv.gpus)
        clear = switching_into_dynamic(desired, previous)
        src = "spec.mig.partitioning"
        return [GpuTarget(g.index, mig=True, clear=clear, source=src) for g in inv.gpus], errors, []
    return _static(inv, mig.layout)


def _not_capable(gpus: Sequence[GpuInfo]) -> list[LayoutError]:
    return [
        LayoutError("spec.mode", f"GPU {g.index} ({g.name}) is not MIG-capable", _EXCLUDE_FIX)
        for g in gpus
        if not g.mig_capable
    ]


def _static(
    inv: Inventory, layouts: Sequence[MigLayout]
) -> tuple[list[GpuTarget], list[LayoutError], list[str]]:
    errors: list[LayoutError] = []
    indices = [g.index for g in inv.gpus]
    owner: dict[int, int] = {}
    all_entry: int | None = None
    for li, layout in enumerate(layouts):
        if layout.gpus == "all":
            if all_entry is None:
                all_entry = li
            else:
                errors.append(
                    LayoutError(
                        f"spec.mig.layout[{li}].gpus",
                        f"spec.mig.layout[{all_entry}] already covers all GPUs",
                        "keep one `gpus: all` entry and name GPU indices in the others",
                    )
                )
            continue
        for j, idx in enumerate(layout.gpus):
            path = f"spec.mig.layout[{li}].gpus[{j}]"
            if idx not in indices:
                have = f"0-{len(indices) - 1}" if indices else "none"
                errors.append(
                    LayoutError(
                        path,
                        f"the node has no GPU {idx} (its GPU indices: {have})",
                        "name GPU indices the node has, or use `gpus: all`",
                    )
                )
            elif idx in owner:
                errors.append(
                    LayoutError(
                        path,
                        f"GPU {idx} already gets its layout from spec.mig.layout[{owner[idx]}]",
                        "name each GPU in one layout entry only",
                    )
                )
            else:
                owner[idx] = li
    if all_entry is not None:
        for idx in indices:
            owner.setdefault(idx, all_entry)
    notes = [
        f"GPU {g.index} is not named by spec.mig.layout; left as it is"
        for g in inv.gpus
        if g.index not in owner
    ]
    targeted = [g for g in inv.gpus if g.index in owner]
    errors += _not_capable(targeted)
    refused, unconfirmed = _unconfirmed(targeted)
    errors += refused
    groups: dict[tuple[int, str, tuple[object, ...]], list[GpuInfo]] = {}
    for g in targeted:
        if g.name in unconfirmed:
            continue  # refused above: not checked against its listing either
        if g.mig_capable and (g.profiles or g.mig_current):
            key = (owner[g.index], g.name, tuple(p.model_dump_json() for p in g.profiles))
            groups.setdefault(key, []).append(g)
        # else: MIG is off and neither the driver nor the catalog knows the profiles; the
        # layout is checked against the driver's listing once MIG is on (core.mig.partition, two
        # phases)
    for (li, _, _), gpus in groups.items():
        geometry = geometry_of_gpu(gpus[0], model_for_name(gpus[0].name))
        errors += _check(li, layouts[li], geometry, _label(gpus))
    targets = [
        GpuTarget(
            g.index,
            mig=True,
            profiles=dict(layouts[owner[g.index]].profiles),
            source=f"spec.mig.layout[{owner[g.index]}]",
        )
        for g in targeted
    ]
    return targets, errors, notes


def _unconfirmed(gpus: Sequence[GpuInfo]) -> tuple[list[LayoutError], set[str]]:
    """A static layout on MIG-capable GPUs without a confirmed catalog row is refused, one error
    per GPU model, whatever the driver lists: the controller's refusal of such a node
    (models.gpu_catalog_unconfirmed.static_refusal_for_gpu), so that a layout released before it
    (or by hand) is not applied either; nothing on the node is changed, not even MIG mode.
    Returns the errors and the NVML names refused."""
    by_name: dict[str, list[GpuInfo]] = {}
    for g in gpus:
        if g.mig_capable:
            by_name.setdefault(g.name, []).append(g)
    errors: list[LayoutError] = []
    refused: set[str] = set()
    for name, same in by_name.items():
        why = static_refusal_for_gpu(name)
        if why is not None:
            refused.add(name)
            errors.append(
                LayoutError(
                    "spec.mig.partitioning",
                    f"{_label(same)}: this node {why}; the agent changes nothing on it",
                    static_refusal_fix(),
                    UNCONFIRMED,
                )
            )
    return errors, refused


def _label(gpus: Sequence[GpuInfo]) -> str:
    idx = [g.index for g in gpus]
    if len(idx) == 1:
        which = f"GPU {idx[0]}"
    elif idx == list(range(idx[0], idx[-1] + 1)):
        which = f"GPUs {idx[0]}-{idx[-1]}"
    else:
        which = "GPUs " + ", ".join(map(str, idx))
    return f"{which} ({gpus[0].name})"


def example_layout(geometry: Geometry) -> dict[str, int]:
    """mig-parted's `all-balanced` shape
    (NVIDIA/mig-parted@v0.15.0:pkg/mig/builder/balanced.go): 7 slices {1g:2, 2g:1, 3g:1}; 4 slices
    {1g:2, 2g:1}; base profiles, and per size the one with the most instances."""
    out: dict[str, int] = {}
    want = {1: 2, 2: 1, 3: 1} if geometry.compute_slices >= 7 else {1: 2, 2: 1}
    for slices, count in want.items():
        base = [s for s in geometry.shapes if s.slices == slices and "+" not in s.name]
        if base:
            out[max(base, key=lambda s: (s.count, -s.id)).name] = count
    return out


def _check(li: int, layout: MigLayout, geometry: Geometry | None, label: str) -> list[LayoutError]:
    base = f"spec.mig.layout[{li}]"
    if geometry is None:
        return [
            LayoutError(
                base,
                f"{label} lists no MIG profiles with MIG mode on and is not a known GPU model",
                "check the driver (`nvidia-smi mig -lgip` lists nothing even with MIG mode on), "
                "or add the model to models.gpu_catalog",
            )
        ]
    names = ", ".join(s.name for s in geometry.shapes)
    errors: list[LayoutError] = []
    for name, count in layout.profiles.items():
        path = f'{base}.profiles["{name}"]'
        shape = geometry.shape(name)
        if shape is None:
            errors.append(
                LayoutError(path, f"{label} has no MIG profile {name}", f"use one of {names}")
            )
        elif count > shape.count:
            errors.append(
                LayoutError(
                    path,
                    f"{count} x {name} is more than the {shape.count} {label} allows",
                    f"ask for at most {shape.count}",
                )
            )
    if errors:
        return errors
    wanted = expand(geometry, dict(layout.profiles)) or []
    example = example_layout(geometry)
    slices = sum(s.slices for s in wanted)
    memory = sum(s.size for s in wanted)
    if slices > geometry.compute_slices or memory > geometry.memory_slices:
        what = (
            f"{slices} compute slices (the Ng of each profile); "
            f"{label} has {geometry.compute_slices}"
            if slices > geometry.compute_slices
            else f"{memory} memory slices; {label} has {geometry.memory_slices}"
        )
        return [
            LayoutError(
                f"{base}.profiles",
                f"the layout needs {what}",
                f"remove instances until they fit, for example {example}",
            )
        ]
    if solve(geometry, wanted, ()) is None:
        return [
            LayoutError(
                f"{base}.profiles",
                f"the instances cannot be placed on {label} without overlapping "
                "(every profile has fixed start slices, see `nvidia-smi mig -lgipp`)",
                f"choose a combination that fits, for example {example}",
            )
        ]
    return []
