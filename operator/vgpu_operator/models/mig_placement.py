"""The MIG placement arithmetic over the geometry model of models.gpu_catalog: which sets of
GPU instances fit one GPU, with explicit start slices, largest first (moved here from core.mig.place
so the operator config can refuse a `migGeometries` group that cannot exist; core.mig.place
re-exports it).

mig-parted creates instances without a placement and, when the driver's first fit fails, retries
every permutation of the list after clearing the GPU
(NVIDIA/mig-parted@v0.15.0:pkg/mig/config/config.go `iteratePermutationsUntilSuccess`). Here the
placements are found before anything is created: a backtracking search over the legal placements of
each profile (from `-lgipp` or the catalog), largest instances first, next to the instances that are
kept. A feasible layout therefore never fails by ordering, and an infeasible one is known to be
infeasible before the GPU is touched (NVIDIA/k8s-test-infra#886: "a MIG layout can be legal per
entry and impossible to place").

Model (models.gpu_catalog): instances may not share memory slices, and their compute slices add up
to at most the GPU's compute slices. Pure functions, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vgpu_operator.models.gpu_catalog import GpuModel


@dataclass(frozen=True)
class Shape:
    """What placement needs to know of a GPU-instance profile."""

    id: int
    name: str
    slices: int
    size: int
    count: int
    placements: tuple[int, ...]


@dataclass(frozen=True)
class Geometry:
    """The MIG geometry of one GPU: its slices and profiles."""

    compute_slices: int
    memory_slices: int
    shapes: tuple[Shape, ...]

    def shape(self, key: str | int) -> Shape | None:
        for s in self.shapes:
            if (isinstance(key, int) and s.id == key) or s.name == key:
                return s
        return None


@dataclass(frozen=True)
class Placed:
    shape: Shape
    start: int

    @property
    def span(self) -> range:
        return range(self.start, self.start + self.shape.size)


def geometry_of_model(model: GpuModel) -> Geometry:
    return Geometry(
        compute_slices=model.compute_slices,
        memory_slices=model.memory_slices,
        shapes=tuple(
            Shape(p.id, p.name, p.slices, p.size, p.max_count, p.placements) for p in model.profiles
        ),
    )


def _order(shapes: Iterable[Shape]) -> list[Shape]:
    """Largest first: memory slices, then compute slices, then profile ID (deterministic)."""
    return sorted(shapes, key=lambda s: (-s.size, -s.slices, s.id))


def solve(
    geometry: Geometry, wanted: Sequence[Shape], kept: Sequence[Placed]
) -> list[Placed] | None:
    """Placements for `wanted` next to `kept`, in creation order (largest first); None when the
    set cannot be placed at all."""
    used: set[int] = set()
    for p in kept:
        used.update(p.span)
    compute_left = geometry.compute_slices - sum(p.shape.slices for p in kept)
    counts = Counter(p.shape.id for p in kept)
    counts.update(s.id for s in wanted)
    limits = {s.id: s.count for s in geometry.shapes}
    if any(n > limits.get(i, 0) for i, n in counts.items()):
        return None
    if sum(s.slices for s in wanted) > compute_left:
        return None
    order = _order(wanted)
    result: list[Placed] = []

    def place(i: int, floor: int) -> bool:
        if i == len(order):
            return True
        shape = order[i]
        for start in shape.placements:
            if start < floor or start + shape.size > geometry.memory_slices:
                continue
            span = range(start, start + shape.size)
            if any(x in used for x in span):
                continue
            used.update(span)
            result.append(Placed(shape, start))
            # identical shapes take ascending starts: no permutation is tried twice
            nxt = start + 1 if i + 1 < len(order) and order[i + 1] == shape else 0
            if place(i + 1, nxt):
                return True
            result.pop()
            used.difference_update(span)
        return False

    return result if place(0, 0) else None


def expand(geometry: Geometry, profiles: dict[str, int]) -> list[Shape] | None:
    """The instances a `{profile: count}` map asks for; None if a name is unknown."""
    out: list[Shape] = []
    for name, count in profiles.items():
        shape = geometry.shape(name)
        if shape is None:
            return None
        out.extend([shape] * count)
    return out


def feasible(geometry: Geometry, profiles: dict[str, int]) -> bool:
    wanted = expand(geometry, profiles)
    return wanted is not None and solve(geometry, wanted, ()) is not None


def _group_text(profiles: dict[str, int]) -> str:
    return " + ".join(f"{name} x{count}" if count > 1 else name for name, count in profiles.items())


def misfit(model: GpuModel, profiles: dict[str, int]) -> str | None:
    """Why instances `{profile: count}` cannot exist together on one GPU of `model` (None: they
    can). A profile the catalog does not list is the caller's to judge (`expand` gives None)."""
    return geometry_misfit(geometry_of_model(model), model.nvml_name, profiles)


def geometry_misfit(geometry: Geometry, name: str, profiles: dict[str, int]) -> str | None:
    """`misfit` on a geometry however it is known (the catalog's, or a node's own listing);
    `name` names the GPU in the reason."""
    wanted = expand(geometry, profiles)
    if wanted is None or solve(geometry, wanted, ()) is not None:
        return None
    group = _group_text(profiles)
    shapes = {s.name: s for s in wanted}
    over = [
        f"{p} x{n} (at most {shapes[p].count})" for p, n in profiles.items() if n > shapes[p].count
    ]
    if over:
        return f"{group}: {name} allows no {', '.join(over)}"
    compute = sum(s.slices for s in wanted)
    if compute > geometry.compute_slices:
        return f"{group} needs {compute} of the {geometry.compute_slices} compute slices of {name}"
    memory = sum(s.size for s in wanted)
    each = ", ".join(f"{p} {shapes[p].size}" for p in profiles)
    if memory > geometry.memory_slices:
        return (
            f"{group} needs {memory} of the {geometry.memory_slices} memory slices of {name} "
            f"(memory slices each: {each})"
        )
    starts = ", ".join(f"{p} at {list(shapes[p].placements)}" for p in profiles)
    return f"{group} has no placement on {name}: the instances may start only at {starts}"
