"""Placement of MIG GPU instances: explicit start slices for a wanted set, computed up front.

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
from vgpu_operator.models.inventory import GpuInfo


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


def geometry_of_gpu(gpu: GpuInfo, model: GpuModel | None) -> Geometry | None:
    """The geometry the driver reported for `gpu`, else the catalog's for its model."""
    if gpu.profiles:
        shapes = tuple(
            Shape(p.id, p.name, p.slices, p.size, p.count, tuple(p.placements))
            for p in gpu.profiles
        )
        compute = max(s.slices for s in shapes)
        memory = max((start + s.size for s in shapes for start in s.placements), default=0)
        if model is not None and model.mig_capable:
            compute, memory = model.compute_slices, model.memory_slices
        return Geometry(compute, memory, shapes)
    if model is not None and model.mig_capable:
        return geometry_of_model(model)
    return None


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
