"""What counts as a GPU consumer: one definition for the drain, the pod index, `plan`, the
never-fit warnings and the node agent's in-use check.

A pod consumes a node's GPUs when any (init) container requests or limits, non-zero, an extended
resource a GPU may back, or when it holds a ResourceClaim (Dynamic Resource Allocation: which
driver allocated it is on the claim, not on the pod, so a claim counts until shown otherwise).

A GPU may back:
- NVIDIA's names and everything else in the `nvidia.com/` domain: `nvidia.com/gpu`,
  `nvidia.com/mig-<profile>` (NVIDIA/k8s-device-plugin, MIG strategy mixed),
  `nvidia.com/gpu.shared` (its time-slicing and MPS `renameByDefault`), and HAMi's own
  `nvidia.com/gpumem`, `nvidia.com/gpucores`, `nvidia.com/gpumem-percentage`
  (Project-HAMi/HAMi@v2.6.0:charts/hami/values.yaml `resourceName`, `resourceMem`, `resourceCores`);
- Volcano's vGPU names and HAMi's domain (`volcano.sh/vgpu-*`, `hami.io/*`), legacy GPU sharing
  (`volcano.sh/gpu-memory`, `volcano.sh/gpu-number`), Ascend NPUs (`huawei.com/Ascend*`);
- any other name that says gpu or mig (a device plugin's renamed resource), and the operator
  config's own resource names.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

GPU_DOMAINS = ("nvidia.com/", "volcano.sh/vgpu", "hami.io/", "huawei.com/Ascend")
_GPU_WORDS = re.compile(r"gpu|mig", re.IGNORECASE)


def gpu_backed(resource: str, names: Collection[str] = ()) -> bool:
    """Whether an allocation of this resource may be a GPU (or NPU) of the node."""
    return (
        resource in names
        or resource.startswith(GPU_DOMAINS)
        or bool(_GPU_WORDS.search(resource.rsplit("/", 1)[-1]))
    )


def _containers(pod: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]


def gpu_consumer(pod: Mapping[str, Any], names: Collection[str] = ()) -> bool:
    """Whether the pod consumes a GPU (see the module docstring)."""
    if (pod.get("spec") or {}).get("resourceClaims"):
        return True
    for c in _containers(pod):
        res = (c or {}).get("resources") or {}
        for part in ("limits", "requests"):
            for key, value in (res.get(part) or {}).items():
                if gpu_backed(str(key), names) and str(value) not in ("0", ""):
                    return True
    return False
