"""Placement of MIG GPU instances: explicit start slices for a wanted set, computed up front.

The arithmetic is models.mig_placement (the operator config validates with it too); here the
geometry of a GPU as its node's inventory reports it.
"""

from __future__ import annotations

from vgpu_operator.models.gpu_catalog import GpuModel
from vgpu_operator.models.inventory import GpuInfo
from vgpu_operator.models.mig_placement import (
    Geometry,
    Placed,
    Shape,
    expand,
    feasible,
    geometry_of_model,
    solve,
)

__all__ = [
    "Geometry",
    "Placed",
    "Shape",
    "expand",
    "feasible",
    "geometry_of_gpu",
    "geometry_of_model",
    "solve",
]


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
