"""Bounds on what one node writes that the controller reads.

A node's labels and annotations are written by whoever holds that node's credentials (its
kubelet, GPU Feature Discovery, the device plugin, the operator's agent): one node must not be
able to stall or poison the configuration of the others. Every per-node count the controller
reads is checked against a bound before anything is allocated for it; a node over a bound is
refused (its value is not used, a finding names the node and the field) and the other nodes
proceed.
"""

from __future__ import annotations

from typing import Final

# GPUs one node may have. The largest NVIDIA systems have 8 (DGX/HGX H100, B200) or 16 (DGX-2,
# HGX-2) GPUs per node, and a policy's `filterDevices.index` may name 0-63 already: 64 leaves
# room for anything real while a label of 10^12 GPUs costs nothing. This bounds GPU Feature
# Discovery's `nvidia.com/gpu.count`, the GPUs of the agent's inventory and their indexes, and
# the device plugin's register records (one per GPU).
MAX_GPUS_PER_NODE: Final = 64

# The bytes one node's entry may take in a node ConfigMap (`volcano-vgpu-node-config`,
# `hami-device-node-config`), as JSON in the file's own layout. An entry is ~250 bytes; one that
# filters 64 GPUs by UUID and index ~6 KiB. 16 KiB leaves room for a policy that lists a few
# hundred UUIDs, while no single node can bring the ConfigMap near its limit (below) and so
# block every other node's entry.
MAX_NODE_ENTRY_BYTES: Final = 16 * 1024

# What the apiserver accepts in a ConfigMap's data (`MaxSecretSize`, 1 MiB:
# kubernetes/kubernetes@v1.35.4:pkg/apis/core/validation/validation.go `ValidateConfigMap`).
CONFIGMAP_DATA_LIMIT: Final = 1024 * 1024


def gpu_count(text: str | None) -> int | None:
    """A GPU count label (`nvidia.com/gpu.count`) as a number: None when absent, not a whole
    number, or out of bounds (`count_out_of_bounds` says why). Never converts a long string."""
    digits = (text or "").strip()
    if not (digits.isascii() and digits.isdigit()) or count_out_of_bounds(digits) is not None:
        return None
    return int(digits)


def count_out_of_bounds(text: str) -> str | None:
    """Why a GPU count is out of bounds: negative, or over `MAX_GPUS_PER_NODE` (None: within
    them, or not a number at all, which the readers treat as absent)."""
    digits = text.strip()
    sign = digits[:1] if digits[:1] in "+-" else ""
    digits = digits[len(sign) :].lstrip("0") or "0"
    if not (digits.isascii() and digits.isdigit()):
        return None
    if sign == "-" and digits != "0":
        return f"{_short(text)} is negative"
    if len(digits) > len(str(MAX_GPUS_PER_NODE)) or int(digits) > MAX_GPUS_PER_NODE:
        return f"{_short(text)} is more than the {MAX_GPUS_PER_NODE} GPUs a node may have"
    return None


def _short(text: str, limit: int = 24) -> str:
    text = text.strip()
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"
