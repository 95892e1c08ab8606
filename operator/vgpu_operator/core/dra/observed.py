"""What the apiserver shows of Dynamic Resource Allocation, as the shell reads it
(`controller.snapshot.read_dra_api`) for the rules: the versions of resource.k8s.io it serves,
the DeviceClasses and the ResourceSlices of the driver the operator config's `dra` names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class DraApi:
    """`served`: the resource.k8s.io group versions ("resource.k8s.io/v1", ...); empty: none.
    `device_classes`, `resource_slices`: as listed (none while resource.k8s.io/v1 is not
    served)."""

    served: tuple[str, ...] = ()
    device_classes: tuple[Obj, ...] = ()
    resource_slices: tuple[Obj, ...] = ()
