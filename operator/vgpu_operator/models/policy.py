"""VGPUNodePolicy: the one source of truth for the CRD spec and status.

`crds/` is generated from these models (`vgpu-operator crds`); a test fails when they drift.
Field names are the CRD's (camelCase). Every cross-field rule is declared once, as an
`AdmissionRule` in the `RULES` of the model it sits on: its CEL expression goes into the CRD
(`x-kubernetes-validations`, the apiserver refuses the object) and its Python predicate runs when
the model validates (the operator refuses a spec written before the CRD had the rule), both with
the same field and message (`models.admission`). What CEL cannot express is checked by the
operator (core.nodes.validate). The spec's parts are models of their own: `policy_modes` (hamiCore,
ascendVnpu, mig, dra), `policy_rollout` (rollout), `labels` (which label and taint keys are valid).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from vgpu_operator import contract
from vgpu_operator.models.admission import (
    AdmissionRule,
    PolicyModel,
    as_stored,
    cel_literal,
    cel_rules,
)
from vgpu_operator.models.labels import (
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    RESERVED_LABEL_PREFIX,
    SWITCH_LABELS,
    SYSTEM_KEY_PATTERN,
    reserved_label,
    system_key,
)
from vgpu_operator.models.policy_modes import AscendVnpuSpec, DraSpec, HamiCoreSpec, MigSpec
from vgpu_operator.models.policy_rollout import RolloutSpec

MAX_NAME_LENGTH = 63  # the policy name is the value of the vgpu.volcano.sh/policy label
MAX_NODE_LABELS = 64
MAX_NODE_TAINTS = 32


class LabelSelectorRequirement(PolicyModel):
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


class LabelSelector(PolicyModel):
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


class Taint(PolicyModel):
    key: Annotated[str, Field(min_length=1, max_length=317, pattern=LABEL_KEY_PATTERN)]
    value: Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)] = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


_SYSTEM = cel_literal(SYSTEM_KEY_PATTERN)


class VGPUNodePolicySpec(PolicyModel):
    node_selector: LabelSelector = Field(
        alias="nodeSelector",
        description="Which nodes form the pool (required, not empty). Nodes that show no GPU "
        "of the mode (GPU Feature Discovery's labels, the device plugin's capacity) are "
        "reported, never written.",
    )
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    mode: Literal["hami-core", "mig", "whole-gpu", "ascend-vnpu", "dra"] = Field(
        description="How the pool's GPUs are shared: hami-core (HAMi vGPU), mig, whole-gpu "
        "(NVIDIA's device plugin), ascend-vnpu, or dra (NVIDIA's DRA driver hands them out "
        "through ResourceClaims; spec.dra says what it publishes)."
    )
    hami_core: HamiCoreSpec | None = Field(default=None, alias="hamiCore")
    ascend_vnpu: AscendVnpuSpec | None = Field(default=None, alias="ascendVnpu")
    mig: MigSpec | None = None
    dra: DraSpec | None = Field(
        default=None,
        description="Mode dra only: what NVIDIA's DRA driver publishes (unset: whole-gpu).",
    )
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
        "(volcano.sh/vgpu.enabled=true; ascend=on for ascend-vnpu; none for whole-gpu and dra). "
        "Keys under kubernetes.io/, k8s.io/ (and their subdomains) and vgpu.volcano.sh/ are "
        "refused.",
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
    # -- adopting a hand-configured cluster and leaving it (core.nodes.adoption) --
    adopt_existing: bool = Field(
        default=False,
        alias="adoptExisting",
        description="A label or taint a node already carries with exactly the value this "
        "policy wants is never a collision and costs no write. false (the default): it stays "
        "the user's and is never removed; true: it is recorded as the operator's "
        "(vgpu.volcano.sh/owned, so a later change of the policy's value is no collision) "
        "together with the user's value, which is put back when the node leaves the pool.",
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
            "!has(self.dra) || self.mode == 'dra'",
            "spec.dra is allowed only with mode: dra",
            lambda spec: spec.dra is None or spec.mode == "dra",
            ".dra",
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
        """The MIG settings the pool's GPUs carry: `mig` mode without a block means dynamic; a
        `dra` pool's are its `devices` (`DraSpec.mig`); None: MIG off."""
        if self.mode == "dra":
            return self.effective_dra().mig()
        if self.mode != "mig":
            return None
        return self.mig or MigSpec()

    def effective_dra(self) -> DraSpec:
        """A `dra` pool's settings: mode dra without a block hands out whole GPUs."""
        return self.dra or DraSpec()

    @property
    def mig_field(self) -> str:
        """Where the MIG layout of `effective_mig` is written in the spec (for messages)."""
        return "spec.dra" if self.mode == "dra" else "spec.mig"

    def effective_labels(self) -> dict[str, str]:
        if self.node_labels is not None:
            return dict(self.node_labels)
        if self.mode in ("whole-gpu", "dra"):
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


class Condition(PolicyModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    last_transition_time: str = Field(alias="lastTransitionTime")


class NodeProblem(PolicyModel):
    node: str
    reason: str
    message: str = ""


MAX_PROBLEM_NODES = 20


class VGPUNodePolicyStatus(PolicyModel):
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


class VGPUNodePolicy(PolicyModel):
    """A policy as read from the cluster (metadata trimmed to what the core needs). Its `RULES`
    sit on the CRD's root (`self` is the whole object there)."""

    name: str
    generation: int = 1
    uid: str = ""
    deleting: bool = False
    # False: its deletion evicts no GPU pod (annotation `vgpu.volcano.sh/evict-gpu-pods: "false"`,
    # what `vgpu-operator cleanup` sets unless told to evict)
    evict_gpu_pods: bool = True
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
