"""VGPUNodePolicy: the one source of truth for the CRD spec and status.

`crds/` is generated from these models (`vgpu-operator crds`); a test fails when they drift.
Field names are the CRD's (camelCase). Every cross-field rule is declared once, as an
`AdmissionRule` in the `RULES` of the model it sits on: its CEL expression goes into the CRD
(`x-kubernetes-validations`, the apiserver refuses the object) and its Python predicate runs when
the model validates (the operator refuses a spec written before the CRD had the rule), both with
the same field and message. What CEL cannot express is checked by the operator (core.validate).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vgpu_operator import contract

LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
MIG_PROFILE_PATTERN = r"^[1-8]g\.[0-9]+gb(\+me)?$"
# A label or taint key whose prefix is kubernetes.io or k8s.io, or ends in .kubernetes.io or
# .k8s.io: reserved for Kubernetes' own components (https://kubernetes.io/docs/reference/
# labels-annotations-taints/); node-restriction.kubernetes.io/ labels steer isolated workloads.
SYSTEM_KEY_PATTERN = r"^([^/]*\.)?(kubernetes\.io|k8s\.io)/"
MAX_NAME_LENGTH = 63  # the policy name is the value of the vgpu.volcano.sh/policy label

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


def cel_literal(text: str) -> str:
    """A CEL single-quoted string literal for `text` (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class AdmissionRule:
    """One cross-field rule, declared once. `cel` is what the apiserver evaluates (`self` is the
    object the rule sits on); `check(obj)` is the same predicate on the validated model, True
    when the object passes. `field` is relative to that object (`.mig`), as CEL's `fieldPath`
    (empty: the object itself); `message` is what both say when the rule fails."""

    cel: str
    message: str
    check: Callable[[Any], bool]
    field: str = ""

    def schema(self) -> dict[str, str]:
        entry = {"rule": self.cel, "message": self.message}
        if self.field:
            entry["fieldPath"] = self.field
        return entry

    def error(self) -> str:
        """The model's error text: `<field>: <message>` (core.validate maps it to the path)."""
        return f"{self.field.lstrip('.')}: {self.message}" if self.field else self.message


def cel_rules(rules: tuple[AdmissionRule, ...]) -> dict[str, Any]:
    """`json_schema_extra` carrying the rules' CEL (`x-kubernetes-validations`)."""
    return {"x-kubernetes-validations": [r.schema() for r in rules]}


def failed_rule(obj: Any, rules: tuple[AdmissionRule, ...]) -> AdmissionRule | None:
    return next((r for r in rules if not r.check(obj)), None)


# Label keys a policy may not set through nodeLabels: the operator's own namespace and the GPU
# Operator's switches (managed by disableNvidiaDevicePlugin and disableNvidiaMigManager).
RESERVED_LABEL_PREFIX = f"{contract.GROUP}/"
SWITCH_LABELS = (
    contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL,
    contract.GPU_OPERATOR_MIG_MANAGER_LABEL,
)
MAX_NODE_LABELS = 64
MAX_NODE_TAINTS = 32
MAX_MIG_PROFILES = 16
MAX_MIG_LAYOUTS = 64
MIG_COMPUTE_SLICES = 7


def _profile_slices(profile: str) -> int:
    """Compute slices of a GPU instance profile: the `<G>` of `<G>g.<GB>gb`."""
    return int(profile.split("g.", 1)[0])


def reserved_label(key: str) -> bool:
    return key.startswith(RESERVED_LABEL_PREFIX) or key in SWITCH_LABELS


def as_stored(value: Any) -> Any:
    """A spec as the apiserver validates and stores it: `null` members of an object dropped
    (a non-nullable field's null is pruned before validation) and integral numbers (`5.0`) as
    integers (an integer field takes them). With the models strict (no "5" for 5, no 1 for
    true, as the apiserver), the models then accept exactly what the CRD accepts."""
    if isinstance(value, dict):
        return {k: as_stored(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [as_stored(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


class Model(BaseModel):
    """Strict base: unknown fields are errors, so a typo never passes silently, and no value is
    coerced from another type. A subclass's `RULES` are checked after its fields (the first
    that fails is the error)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)
    RULES: ClassVar[tuple[AdmissionRule, ...]] = ()

    @model_validator(mode="after")
    def _admission_rules(self) -> Any:
        failed = failed_rule(self, type(self).RULES)
        if failed is not None:
            raise ValueError(failed.error())
        return self


class LabelSelectorRequirement(Model):
    key: Annotated[str, Field(min_length=1, max_length=317, pattern=LABEL_KEY_PATTERN)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[Annotated[str, Field(max_length=63)]] = Field(default_factory=list)

    RULES = (
        AdmissionRule(
            "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : "
            "(!has(self.values) || size(self.values) == 0)",
            "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
            lambda r: bool(r.values) == (r.operator in ("In", "NotIn")),
            ".values",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))


class LabelSelector(Model):
    """A standard Kubernetes label selector; a policy's must not be empty (an empty selector
    would select every node, CPU-only and control-plane nodes included)."""

    match_labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, alias="matchLabels"
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )

    RULES = (
        AdmissionRule(
            "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
            "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
            "nodeSelector must not be empty: an empty selector selects every node, CPU-only and "
            "control-plane nodes included; name the GPU nodes (e.g. matchLabels "
            "nvidia.com/gpu.present: 'true')",
            lambda sel: bool(sel.match_labels or sel.match_expressions),
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))


class Taint(Model):
    key: Annotated[str, Field(min_length=1, max_length=317, pattern=LABEL_KEY_PATTERN)]
    value: Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)] = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class FilterDevices(Model):
    """GPUs the device plugin must not register on the node."""

    uuid: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    index: list[Annotated[int, Field(ge=0, le=63)]] = Field(default_factory=list)


class HamiCoreSpec(Model):
    """Per-node overrides the HAMi plugin reads from `volcano-vgpu-node-config`."""

    device_split_count: Annotated[int, Field(ge=1, le=128)] | None = Field(
        default=None, alias="deviceSplitCount"
    )
    device_memory_scaling: Annotated[float, Field(gt=0, le=100)] | None = Field(
        default=None, alias="deviceMemoryScaling"
    )
    device_core_scaling: Annotated[float, Field(gt=0, le=100)] | None = Field(
        default=None, alias="deviceCoreScaling"
    )
    filter_devices: FilterDevices | None = Field(default=None, alias="filterDevices")


class AscendVnpuSpec(Model):
    """Per-node fields of `hami-device-node-config` (HAMi's Ascend vNPU)."""

    v_device_count: Annotated[int, Field(ge=1, le=128)] | None = Field(
        default=None, alias="vDeviceCount"
    )
    hami_vnpu_core: bool | None = Field(default=None, alias="hamiVnpuCore")
    filter_devices: FilterDevices | None = Field(default=None, alias="filterDevices")


class MigLayout(Model):
    """A fixed MIG layout for some GPUs of a node: `{gpus: all, profiles: {"1g.10gb": 7}}`."""

    gpus: Literal["all"] | list[Annotated[int, Field(ge=0, le=63)]] = Field(
        default="all",
        description='"all", or a list of GPU indexes (0-63) this layout applies to.',
    )
    profiles: dict[
        Annotated[str, Field(pattern=MIG_PROFILE_PATTERN)], Annotated[int, Field(ge=1, le=7)]
    ] = Field(max_length=MAX_MIG_PROFILES)

    RULES = (
        AdmissionRule(
            "size(self.profiles) > 0",
            "profiles must name at least one MIG profile",
            lambda layout: bool(layout.profiles),
            ".profiles",
        ),
        AdmissionRule(
            f"self.profiles.map(k, int(k.substring(0, 1)) * self.profiles[k]).sum() <= "
            f"{MIG_COMPUTE_SLICES}",
            f"the profiles of one GPU use at most {MIG_COMPUTE_SLICES} compute slices (the <G> "
            "of <G>g.<GB>gb times the count)",
            lambda layout: (
                sum(_profile_slices(p) * n for p, n in layout.profiles.items())
                <= MIG_COMPUTE_SLICES
            ),
            ".profiles",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))


class MigSpec(Model):
    """MIG partitioning. `dynamic`: the device plugin creates instances per allocation (the
    node needs MIG mode on). `static`: a fixed layout per GPU, for pools served by NVIDIA's
    device plugin with a MIG strategy."""

    partitioning: Literal["dynamic", "static"] = "dynamic"
    layout: list[MigLayout] = Field(default_factory=list, max_length=MAX_MIG_LAYOUTS)

    RULES = (
        AdmissionRule(
            "(has(self.partitioning) && self.partitioning == 'static') ? "
            "(has(self.layout) && size(self.layout) > 0) : "
            "(!has(self.layout) || size(self.layout) == 0)",
            "a static partitioning needs a layout; a dynamic one takes none (the device "
            "plugin creates the instances)",
            lambda mig: bool(mig.layout) == (mig.partitioning == "static"),
            ".layout",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))


MAX_UNAVAILABLE_PATTERN = r"^([0-9]+|[0-9]{1,2}%|100%)$"


class DrainSpec(Model):
    """How a node is emptied before a disruptive change (a mode or MIG layout change)."""

    enabled: bool = Field(
        default=True,
        description="Cordon the node, drain its GPU pods and pause its GPU clients before a "
        "disruptive change. false: none of that, but releases are still limited by "
        "maxUnavailable and verified.",
    )
    mode: Literal["Evict", "Wait"] = Field(
        default="Evict",
        description="Evict: the node's GPU pods are evicted through the Eviction API, which "
        "respects PodDisruptionBudgets. Wait: the node is released only after its GPU pods end.",
    )
    timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = Field(
        default=600,
        alias="timeoutSeconds",
        description="How long the drain may take; then the node fails (onFailure). 0: a node "
        "with GPU pods fails at once.",
    )
    delete_empty_dir_data: bool = Field(
        default=False,
        alias="deleteEmptyDirData",
        description="Evict pods with emptyDir volumes too (their data is lost). false: such a "
        "pod holds the node until the drain times out, as `kubectl drain` refuses it.",
    )


def max_unavailable_count(value: int | str, nodes: int) -> int:
    """`maxUnavailable` as a number of nodes of a pool of `nodes`: a percent rounded up, and
    never less than 1 (a rollout always makes progress)."""
    if isinstance(value, int):
        return max(1, value)
    if value.endswith("%"):
        percent = int(value[:-1])
        return max(1, -(-percent * nodes // 100))
    return max(1, int(value))


class RolloutSpec(Model):
    """How configuration changes reach the pool's nodes: a few nodes at a time, each one
    cordoned, drained, paused, released, verified and uncordoned."""

    max_unavailable: (
        Annotated[int, Field(ge=1, le=100000)]
        | Annotated[str, Field(pattern=MAX_UNAVAILABLE_PATTERN)]
    ) = Field(
        default=1,
        alias="maxUnavailable",
        description="Nodes in transition at once (from cordon to uncordon; a failed node still "
        "counts): a count, or a percent of the pool's nodes rounded up; at least 1.",
    )
    drain: DrainSpec = Field(default_factory=DrainSpec)
    step_timeout_seconds: Annotated[int, Field(ge=1, le=86400)] = Field(
        default=600,
        alias="stepTimeoutSeconds",
        description="How long each other step (pause, the agent's apply, the plugin's "
        "registration, resume) may take; then the node fails (onFailure).",
    )
    progress_deadline_seconds: Annotated[int, Field(ge=1, le=604800)] = Field(
        default=3600,
        alias="progressDeadlineSeconds",
        description="How long one node's whole transition may take; then it fails. After any "
        "failure the rollout takes no new nodes until the spec changes (a new generation).",
    )
    on_failure: Literal["KeepCordoned", "Uncordon"] = Field(
        default="KeepCordoned",
        alias="onFailure",
        description="What a failed node does: stay cordoned for a person to look at, or be "
        "uncordoned (only if the operator cordoned it) with its GPU clients resumed.",
    )

    RULES = (
        AdmissionRule(
            "type(self.maxUnavailable) == int ? self.maxUnavailable >= 1 : "
            "!self.maxUnavailable.matches('^0+%?$')",
            "maxUnavailable must be at least 1 (or 1%): with 0 no node could ever change",
            lambda r: (
                r.max_unavailable >= 1
                if isinstance(r.max_unavailable, int)
                else not re.fullmatch(r"0+%?", r.max_unavailable)
            ),
            ".maxUnavailable",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))

    def budget(self, nodes: int) -> int:
        return max_unavailable_count(self.max_unavailable, nodes)


_SYSTEM = cel_literal(SYSTEM_KEY_PATTERN)


class VGPUNodePolicySpec(Model):
    node_selector: LabelSelector = Field(
        alias="nodeSelector",
        description="Which nodes form the pool (required, not empty). Nodes that show no GPU "
        "of the mode (GPU Feature Discovery's labels, the device plugin's capacity) are "
        "reported, never written.",
    )
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    mode: Literal["hami-core", "mig", "whole-gpu", "ascend-vnpu"]
    hami_core: HamiCoreSpec | None = Field(default=None, alias="hamiCore")
    ascend_vnpu: AscendVnpuSpec | None = Field(default=None, alias="ascendVnpu")
    mig: MigSpec | None = None
    node_labels: (
        dict[
            Annotated[str, Field(pattern=LABEL_KEY_PATTERN)],
            Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)],
        ]
        | None
    ) = Field(
        default=None,
        alias="nodeLabels",
        max_length=MAX_NODE_LABELS,
        description="Labels put on the pool's nodes. Unset: the mode's default "
        "(volcano.sh/vgpu.enabled=true; ascend=on for ascend-vnpu; none for whole-gpu). Keys "
        "under kubernetes.io/, k8s.io/ (and their subdomains) and vgpu.volcano.sh/ are refused.",
    )
    node_taints: list[Taint] | None = Field(
        default=None,
        alias="nodeTaints",
        max_length=MAX_NODE_TAINTS,
        description="Taints put on the pool's nodes. Unset: the mode's default "
        "(volcano.sh/vgpu=hami:NoSchedule for hami-core and mig; none otherwise). "
        "At most one taint per key and effect, as on a Node. NoExecute only with "
        "allowNoExecute; keys under kubernetes.io/ and k8s.io/ are refused.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["key", "effect"],
        },
    )
    allow_no_execute: bool = Field(
        default=False,
        alias="allowNoExecute",
        description="Allow NoExecute taints in nodeTaints. They evict every pod that does not "
        "tolerate them, the node agent and the device plugins included: tolerate them there "
        "first.",
    )
    disable_nvidia_device_plugin: bool = Field(
        default=False,
        alias="disableNvidiaDevicePlugin",
        description="Label the pool's nodes nvidia.com/gpu.deploy.device-plugin=false so the "
        "GPU Operator's device plugin leaves them; restored when a node leaves the pool.",
    )
    disable_nvidia_mig_manager: bool = Field(
        default=False,
        alias="disableNvidiaMigManager",
        description="Label the pool's nodes nvidia.com/gpu.deploy.mig-manager=false so the GPU "
        "Operator's mig-manager leaves them (one MIG manager per GPU: the node agent applies no "
        "static layout where it is configured); restored when a node leaves the pool.",
    )
    # -- adopting a hand-configured cluster and leaving it (core.adoption) --
    adopt_existing: bool = Field(
        default=False,
        alias="adoptExisting",
        description="A label or taint a node already carries with exactly the value this "
        "policy wants is never a collision and costs no write. false (the default): it stays "
        "the user's and is never removed; true: it is recorded as the operator's "
        "(vgpu.volcano.sh/owned) and removed when the node leaves the pool.",
    )
    on_delete: Literal["Delete", "Retain"] | None = Field(
        default=None,
        alias="onDelete",
        description="What deleting this policy does to its nodes. Delete: the operator removes "
        "what it set (labels, taints, MIG layout). Retain: everything stays as it is and the "
        "operator only stops managing the nodes (drops its ownership record). Unset: the "
        "operator config's onDelete (Delete unless set there).",
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    suspend: bool = False

    RULES = (
        AdmissionRule(
            "!has(self.mig) || self.mode == 'mig'",
            "spec.mig is allowed only with mode: mig",
            lambda spec: spec.mig is None or spec.mode == "mig",
            ".mig",
        ),
        AdmissionRule(
            "!has(self.hamiCore) || self.mode in ['hami-core', 'mig']",
            "spec.hamiCore is allowed only with mode hami-core or mig",
            lambda spec: spec.hami_core is None or spec.mode in ("hami-core", "mig"),
            ".hamiCore",
        ),
        AdmissionRule(
            "!has(self.ascendVnpu) || self.mode == 'ascend-vnpu'",
            "spec.ascendVnpu is allowed only with mode: ascend-vnpu",
            lambda spec: spec.ascend_vnpu is None or spec.mode == "ascend-vnpu",
            ".ascendVnpu",
        ),
        AdmissionRule(
            "!(has(self.mig) && has(self.mig.partitioning) && "
            "self.mig.partitioning == 'static' && "
            "has(self.disableNvidiaDevicePlugin) && self.disableNvidiaDevicePlugin)",
            "a static MIG layout is served by NVIDIA's device plugin: "
            "disableNvidiaDevicePlugin must stay false",
            lambda spec: (
                not (
                    spec.mig is not None
                    and spec.mig.partitioning == "static"
                    and spec.disable_nvidia_device_plugin
                )
            ),
            ".disableNvidiaDevicePlugin",
        ),
        AdmissionRule(
            "self.mode != 'whole-gpu' || !has(self.nodeTaints) || size(self.nodeTaints) == 0",
            "mode whole-gpu takes no nodeTaints (the operator's taints come off)",
            lambda spec: spec.mode != "whole-gpu" or not spec.node_taints,
            ".nodeTaints",
        ),
        AdmissionRule(
            f"!has(self.nodeLabels) || self.nodeLabels.all(k, "
            f"!k.startsWith({cel_literal(RESERVED_LABEL_PREFIX)}) && "
            f"!(k in [{', '.join(cel_literal(k) for k in SWITCH_LABELS)}]))",
            f"nodeLabels must not set {RESERVED_LABEL_PREFIX}* keys (the operator's own) nor "
            f"{contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL} or "
            f"{contract.GPU_OPERATOR_MIG_MANAGER_LABEL} (use disableNvidiaDevicePlugin and "
            "disableNvidiaMigManager)",
            lambda spec: not any(reserved_label(k) for k in spec.node_labels or {}),
            ".nodeLabels",
        ),
        AdmissionRule(
            f"!has(self.nodeLabels) || self.nodeLabels.all(k, !k.matches({_SYSTEM}))",
            "nodeLabels must not set keys under kubernetes.io/ or k8s.io/ (or their subdomains, "
            "e.g. node-restriction.kubernetes.io/): they are Kubernetes' own",
            lambda spec: not any(system_key(k) for k in spec.node_labels or {}),
            ".nodeLabels",
        ),
        AdmissionRule(
            f"!has(self.nodeTaints) || self.nodeTaints.all(t, !t.key.matches({_SYSTEM}))",
            "nodeTaints must not use keys under kubernetes.io/ or k8s.io/ (or their "
            "subdomains): they are Kubernetes' own",
            lambda spec: not any(system_key(t.key) for t in spec.node_taints or []),
            ".nodeTaints",
        ),
        AdmissionRule(
            "!has(self.nodeTaints) || self.nodeTaints.all(t, t.effect != 'NoExecute') || "
            "(has(self.allowNoExecute) && self.allowNoExecute)",
            "a NoExecute taint evicts every pod that does not tolerate it (the node agent and "
            "the device plugins too): set allowNoExecute: true to mean it, or use NoSchedule",
            lambda spec: (
                spec.allow_no_execute
                or all(t.effect != "NoExecute" for t in spec.node_taints or [])
            ),
            ".nodeTaints",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))

    @model_validator(mode="before")
    @classmethod
    def _stored(cls, data: Any) -> Any:
        return as_stored(data)

    @model_validator(mode="after")
    def _taints_unique(self) -> VGPUNodePolicySpec:
        """The CRD's list-map refuses these as "Duplicate value" (no CEL rule needed)."""
        seen: set[tuple[str, str]] = set()
        for taint in self.node_taints or []:
            if (taint.key, taint.effect) in seen:
                raise ValueError(
                    f"spec.nodeTaints: duplicate taint {taint.key}:{taint.effect} "
                    "(a node holds one taint per key and effect)"
                )
            seen.add((taint.key, taint.effect))
        return self

    def effective_mig(self) -> MigSpec | None:
        """The MIG settings that apply: `mig` mode without a block means dynamic."""
        if self.mode != "mig":
            return None
        return self.mig or MigSpec()

    def effective_labels(self) -> dict[str, str]:
        if self.node_labels is not None:
            return dict(self.node_labels)
        if self.mode == "whole-gpu":
            return {}
        if self.mode == "ascend-vnpu":
            return dict(contract.ASCEND_DEFAULT_NODE_LABELS)
        return dict(contract.DEFAULT_NODE_LABELS)

    def effective_taints(self) -> list[Taint]:
        if self.node_taints is not None:
            return list(self.node_taints)
        if self.mode in ("hami-core", "mig"):
            return [
                Taint(
                    key=contract.DEFAULT_TAINT_KEY,
                    value=contract.DEFAULT_TAINT_VALUE,
                    effect=contract.DEFAULT_TAINT_EFFECT,
                )
            ]
        return []


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    last_transition_time: str = Field(alias="lastTransitionTime")


class NodeProblem(Model):
    node: str
    reason: str
    message: str = ""


MAX_PROBLEM_NODES = 20


class VGPUNodePolicyStatus(Model):
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    matched_nodes: int = Field(default=0, alias="matchedNodes")
    ready_nodes: int = Field(default=0, alias="readyNodes")
    problem_nodes: list[NodeProblem] = Field(
        default_factory=list,
        alias="problemNodes",
        max_length=MAX_PROBLEM_NODES,
        description=f"At most {MAX_PROBLEM_NODES} nodes with problems, and why.",
    )


class VGPUNodePolicy(Model):
    """A policy as read from the cluster (metadata trimmed to what the core needs). Its `RULES`
    sit on the CRD's root (`self` is the whole object there)."""

    name: str
    generation: int = 1
    uid: str = ""
    deleting: bool = False
    spec: VGPUNodePolicySpec

    RULES = (
        AdmissionRule(
            f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
            f"metadata.name must be at most {MAX_NAME_LENGTH} characters: the operator writes "
            f"it as the value of the {contract.LABEL_POLICY} label of the pool's nodes",
            lambda policy: len(policy.name) <= MAX_NAME_LENGTH,
            ".metadata.name",
        ),
    )
