"""NodeFacts: the part of a Node the core reasons about, read once from the raw object.

`node_facts(raw)` never raises: an annotation of the node contract that does not parse is kept
as an error string, so the planner can report it instead of crashing the handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.core.nodes.textcache import ANNOTATIONS, shared
from vgpu_operator.models.labels import system_key, valid_label_key, valid_label_value
from vgpu_operator.models.node import NodeConfig, Owned
from vgpu_operator.models.policy import Taint

# Label prefixes GPU Feature Discovery (and NFD) write; kept apart for the validators.
GFD_PREFIXES = ("nvidia.com/",)
# Extended resources kept from a Node's capacity: the device plugins' (GPU evidence).
DEVICE_RESOURCE_PREFIXES = ("nvidia.com/", "huawei.com/")
# Annotations of the node contract the core reads.
CONTRACT_ANNOTATIONS = (
    contract.ANN_OWNED,
    contract.ANN_TARGET,
    contract.ANN_CONFIG,
    contract.ANN_INVENTORY,
    contract.ANN_ROLLOUT,
    contract.ANN_RETAINED,  # core.nodes.adoption
)

TaintKey = tuple[str, str]  # (key, effect): a node holds at most one taint per pair


def taint_key(taint: Mapping[str, Any]) -> TaintKey:
    return (str(taint.get("key", "")), str(taint.get("effect", "")))


def taint_value(taint: Mapping[str, Any]) -> str:
    return str(taint.get("value") or "")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A Node as the core sees it. `taints` are the raw dicts, kept verbatim (`timeAdded` and
    all) because a taint list PATCH must give back every taint the operator does not own."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    resource_version: str = ""
    owned: Owned = field(default_factory=Owned)
    target: NodeConfig | None = None
    config: NodeConfig | None = None
    # Parse errors of the contract's annotations, by annotation key.
    errors: Mapping[str, str] = field(default_factory=dict)
    # The device plugins' extended resources in the Node's capacity (`nvidia.com/gpu: "8"`).
    capacity: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False  # spec.unschedulable: cordoned (by anyone)
    # Entries of the ownership record the operator may never act on (`disowned_entries`):
    # left out of `owned`, so dropped from the record at the next write, never removed.
    disowned: tuple[str, ...] = ()

    @property
    def gfd(self) -> dict[str, str]:
        """GPU Feature Discovery labels (`nvidia.com/...`)."""
        return {k: v for k, v in self.labels.items() if k.startswith(GFD_PREFIXES)}

    @property
    def policy_label(self) -> str | None:
        return self.labels.get(contract.LABEL_POLICY)

    @property
    def mode_label(self) -> str | None:
        return self.labels.get(contract.LABEL_MODE)

    @property
    def agent_state(self) -> str | None:
        return self.labels.get(contract.LABEL_STATE)

    @property
    def excluded(self) -> bool:
        return self.labels.get(contract.LABEL_EXCLUDE) == "true"

    def taint_map(self) -> dict[TaintKey, Mapping[str, Any]]:
        return {taint_key(t): t for t in self.taints}


# One empty mapping for the many nodes with no contract annotation and no parse error: the
# facts are frozen and read through `Mapping`, never written.
_NONE: Mapping[str, str] = {}


def _str_map(raw: Any) -> Mapping[str, str]:
    """`raw` as a map of strings: itself when it is one already (a decoded Node's labels: the
    facts share the dict with the object they were read from, which is kept as well), else a
    copy of its non-null entries as strings."""
    if not isinstance(raw, Mapping) or not raw:
        return _NONE
    if type(raw) is dict and all(type(k) is str and type(v) is str for k, v in raw.items()):
        return raw
    return {str(k): str(v) for k, v in raw.items() if v is not None}


def node_facts(raw: Mapping[str, Any]) -> NodeFacts:
    """Build NodeFacts from a raw Node (a dict as the API returns it, or Kopf's body)."""
    metadata = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    labels = _str_map(metadata.get("labels"))
    all_annotations = _str_map(metadata.get("annotations"))
    annotations = {k: v for k, v in all_annotations.items() if k in CONTRACT_ANNOTATIONS} or _NONE
    taints = tuple(  # a decoded taint as it is (the kept Node's, shared), anything else copied
        t if type(t) is dict else dict(t)
        for t in (spec.get("taints") or [])
        if isinstance(t, Mapping)
    )
    status = raw.get("status") or {}
    capacity = _str_map(status.get("capacity") or status.get("allocatable"))
    errors: dict[str, str] = {}

    owned, error, disowned = _owned(annotations.get(contract.ANN_OWNED))
    if error is not None:
        errors[contract.ANN_OWNED] = error

    def config_of(key: str) -> NodeConfig | None:
        config, error = _config(annotations.get(key))
        if error is not None:
            errors[key] = error
        return config

    return NodeFacts(
        name=str(metadata.get("name", "")),
        labels=labels,
        annotations=annotations,
        taints=taints,
        resource_version=str(metadata.get("resourceVersion") or ""),
        owned=owned,
        target=config_of(contract.ANN_TARGET),
        config=config_of(contract.ANN_CONFIG),
        errors=errors or _NONE,
        capacity=shared(
            {k: v for k, v in capacity.items() if k.startswith(DEVICE_RESOURCE_PREFIXES)}
        )
        or _NONE,
        unschedulable=spec.get("unschedulable") is True,
        disowned=disowned,
    )


# Parsed annotations, by their text: the nodes of one pool carry the same few texts, and every
# watch event of every node is parsed (the models are frozen, so sharing them is safe). The
# cache is bounded in bytes (core.nodes.textcache): the texts are anyone's who may annotate Nodes.
def _owned(raw: str | None) -> tuple[Owned, str | None, tuple[str, ...]]:
    return ANNOTATIONS.get("owned", raw, _parse_owned)


def _config(raw: str | None) -> tuple[NodeConfig | None, str | None]:
    return ANNOTATIONS.get("config", raw, _parse_config)


def _parse_owned(raw: str | None) -> tuple[Owned, str | None, tuple[str, ...]]:
    try:
        owned = Owned.from_annotation(raw)
    except (ValidationError, ValueError) as exc:
        return Owned(), _short(exc), ()
    kept, disowned = disowned_entries(owned)
    return kept, None, tuple(disowned)


# The node contract's own labels: the controller sets the first three from the policy, the agent
# the state, a person the exclusion. A record never removes or restores them.
CONTRACT_LABELS = frozenset(
    {
        contract.LABEL_POLICY,
        contract.LABEL_MODE,
        contract.LABEL_DEVICE_PLUGIN,
        contract.LABEL_STATE,
        contract.LABEL_EXCLUDE,
    }
)


def releasable_label(key: str, value: str) -> bool:
    """A recorded label the operator may remove (and put a recorded earlier value back on):
    valid, not Kubernetes' own (`kubernetes.io/`, `k8s.io/`), not the node contract's own."""
    return (
        valid_label_key(key)
        and valid_label_value(value)
        and not system_key(key)
        and key not in CONTRACT_LABELS
    )


def _releasable_taint(taint: Taint) -> bool:
    return valid_label_key(taint.key) and not system_key(taint.key)


def disowned_entries(owned: Owned) -> tuple[Owned, list[str]]:
    """The record with only what the operator may act on, and what it left out.

    Kept: labels and taints it may remove (`releasable_label`): what a policy may set today, and
    what an earlier version let it own that this one no longer does (released cleanly when the
    node leaves or is next written: removed while it still has the recorded value, dropped from
    the record). Left out, and so never removed, restored or trusted: Kubernetes' own keys, the
    node contract's own labels, invalid keys or values, a recorded earlier value (`replaced`,
    `replacedTaints`) of anything not kept. A record anyone may edit can then make the operator
    touch nothing it could not have set, and no record freezes a node: what is left out is named
    (`OwnedEntriesDisowned`) and dropped at the next write."""
    bad: list[str] = []
    labels: dict[str, str] = {}
    for key, value in owned.labels.items():
        if releasable_label(key, value):
            labels[key] = value
        else:
            bad.append(f"label {key}={value}")
    taints: list[Taint] = []
    for taint in owned.taints:
        if _releasable_taint(taint):
            taints.append(taint)
        else:
            bad.append(f"taint {taint.key}:{taint.effect}")
    replaced: dict[str, str] = {}
    for key, value in owned.replaced.items():
        if key in labels and valid_label_value(value):
            replaced[key] = value
        else:
            bad.append(f"replaced {key}")
    kept_taints = {(t.key, t.effect) for t in taints}
    replaced_taints: list[Taint] = []
    for taint in owned.replaced_taints:
        if (taint.key, taint.effect) in kept_taints:
            replaced_taints.append(taint)
        else:
            bad.append(f"replacedTaints {taint.key}:{taint.effect}")
    if not bad:
        return owned, []
    kept = Owned(
        labels=labels,
        taints=taints,
        replaced=replaced,
        replaced_taints=replaced_taints,
        on_delete=owned.on_delete,
    )
    return kept, bad


def _parse_config(raw: str | None) -> tuple[NodeConfig | None, str | None]:
    try:
        return NodeConfig.from_annotation(raw), None
    except (ValidationError, ValueError) as exc:
        return None, _short(exc)


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()
    return text[0] if text else type(exc).__name__
