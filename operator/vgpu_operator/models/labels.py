"""Label and taint keys and values as Kubernetes takes them, and the keys a policy may not set:
Kubernetes' own (`kubernetes.io/`, `k8s.io/`), the operator's (`vgpu.volcano.sh/`) and the GPU
Operator's switches (managed by `disableNvidiaDevicePlugin` and `disableNvidiaMigManager`)."""

from __future__ import annotations

import re

from vgpu_operator import contract

LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# A label or taint key whose prefix is kubernetes.io or k8s.io, or ends in .kubernetes.io or
# .k8s.io: reserved for Kubernetes' own components (https://kubernetes.io/docs/reference/
# labels-annotations-taints/); node-restriction.kubernetes.io/ labels steer isolated workloads.
SYSTEM_KEY_PATTERN = r"^([^/]*\.)?(kubernetes\.io|k8s\.io)/"

_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)
_LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)
_SYSTEM_KEY = re.compile(SYSTEM_KEY_PATTERN)


def valid_label_key(key: str) -> bool:
    """A syntactically valid label (or taint) key: `[prefix/]name`, prefix at most 253."""
    prefix, _, name = key.rpartition("/")
    return bool(_LABEL_KEY.fullmatch(key)) and len(prefix) <= 253 and len(name) <= 63


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.fullmatch(value))


def system_key(key: str) -> bool:
    """A key under kubernetes.io/ or k8s.io/ (or a subdomain of them): never the operator's."""
    return bool(_SYSTEM_KEY.match(key))


# Label keys a policy may not set through nodeLabels: the operator's own namespace and the GPU
# Operator's switches (managed by disableNvidiaDevicePlugin and disableNvidiaMigManager).
RESERVED_LABEL_PREFIX = f"{contract.GROUP}/"
SWITCH_LABELS = (
    contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL,
    contract.GPU_OPERATOR_MIG_MANAGER_LABEL,
)


def reserved_label(key: str) -> bool:
    return key.startswith(RESERVED_LABEL_PREFIX) or key in SWITCH_LABELS
