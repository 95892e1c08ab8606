"""VGPUNodePolicy: the one source of truth for the CRD spec and status.

`crds/` is generated from these models (`vgpu-operator crds`); a test fails when they drift.
Field names are the CRD's (camelCase); cross-field rules the apiserver can check are CEL rules
attached with `x-kubernetes-validations`, and the rest is checked by the operator (core.validate).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vgpu_operator import contract

LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
MIG_PROFILE_PATTERN = r"^[1-8]g\.[0-9]+gb(\+me)?$"


def _cel(*rules: tuple[str, str] | tuple[str, str, str]) -> dict[str, Any]:
    """`x-kubernetes-validations` entries as (rule, message) or (rule, message, fieldPath).

    `fieldPath` (relative to the node the rule sits on, e.g. `.mig`) makes the apiserver name
    that field in the rejection instead of the object the rule is attached to.
    """
    entries: list[dict[str, str]] = []
    for rule in rules:
        entry = {"rule": rule[0], "message": rule[1]}
        if len(rule) == 3:
            entry["fieldPath"] = rule[2]
        entries.append(entry)
    return {"x-kubernetes-validations": entries}


# Label keys a policy may not set through nodeLabels: the operator's own namespace and the GPU
# Operator's device-plugin switch (that one is managed by disableNvidiaDevicePlugin).
RESERVED_LABEL_PREFIX = f"{contract.GROUP}/"
MAX_NODE_LABELS = 64
MAX_NODE_TAINTS = 32
MAX_MIG_PROFILES = 16
MAX_MIG_LAYOUTS = 64
MIG_COMPUTE_SLICES = 7


def _profile_slices(profile: str) -> int:
    """Compute slices of a GPU instance profile: the `<G>` of `<G>g.<GB>gb`."""
    return int(profile.split("g.", 1)[0])


class Model(BaseModel):
    """Strict base: unknown fields are errors, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class LabelSelectorRequirement(Model):
    key: Annotated[str, Field(min_length=1, max_length=317, pattern=LABEL_KEY_PATTERN)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[Annotated[str, Field(max_length=63)]] = Field(default_factory=list)

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : "
                "(!has(self.values) || size(self.values) == 0)",
                "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
                ".values",
            )
        )
    )

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values: must be non-empty for operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values: must be empty for operator {self.operator}")
        return self


class LabelSelector(Model):
    """A standard Kubernetes label selector. An empty selector selects every node."""

    match_labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, alias="matchLabels"
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )


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

    model_config = ConfigDict(
        json_schema_extra=_cel(
            ("size(self.profiles) > 0", "profiles must name at least one MIG profile", ".profiles"),
            (
                "self.profiles.map(k, int(k.substring(0, 1)) * self.profiles[k]).sum() <= 7",
                "the profiles of one GPU use at most 7 compute slices (the <G> of <G>g.<GB>gb "
                "times the count)",
                ".profiles",
            ),
        )
    )

    @model_validator(mode="after")
    def _profiles_fit_one_gpu(self) -> MigLayout:
        if not self.profiles:
            raise ValueError("profiles: name at least one MIG profile")
        used = sum(_profile_slices(p) * n for p, n in self.profiles.items())
        if used > MIG_COMPUTE_SLICES:
            raise ValueError(
                f"profiles: the profiles of one GPU use at most {MIG_COMPUTE_SLICES} "
                f"compute slices; these use {used}"
            )
        return self


class MigSpec(Model):
    """MIG partitioning. `dynamic`: the device plugin creates instances per allocation (the
    node needs MIG mode on). `static`: a fixed layout per GPU, for pools served by NVIDIA's
    device plugin with a MIG strategy."""

    partitioning: Literal["dynamic", "static"] = "dynamic"
    layout: list[MigLayout] = Field(default_factory=list, max_length=MAX_MIG_LAYOUTS)

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "(has(self.partitioning) && self.partitioning == 'static') ? "
                "(has(self.layout) && size(self.layout) > 0) : "
                "(!has(self.layout) || size(self.layout) == 0)",
                "a static partitioning needs a layout; a dynamic one takes none (the device "
                "plugin creates the instances)",
                ".layout",
            )
        )
    )

    @model_validator(mode="after")
    def _layout_fits_partitioning(self) -> MigSpec:
        if self.partitioning == "static" and not self.layout:
            raise ValueError("mig.layout: a static partitioning needs a layout")
        if self.partitioning == "dynamic" and self.layout:
            raise ValueError("mig.layout: a dynamic partitioning takes no layout")
        return self


class DrainSpec(Model):
    """How a node is emptied before a disruptive change (used by safe transitions)."""

    enabled: bool = True
    timeout_seconds: Annotated[int, Field(ge=0, le=86400)] = Field(
        default=600, alias="timeoutSeconds"
    )
    delete_empty_dir_data: bool = Field(default=False, alias="deleteEmptyDirData")


class RolloutSpec(Model):
    """Limits for disruptive per-node transitions (a MIG layout or mode change)."""

    max_unavailable: Annotated[str, Field(pattern=r"^([0-9]+|[0-9]{1,2}%|100%)$")] = Field(
        default="1", alias="maxUnavailable"
    )
    drain: DrainSpec = Field(default_factory=DrainSpec)


class VGPUNodePolicySpec(Model):
    node_selector: LabelSelector = Field(default_factory=LabelSelector, alias="nodeSelector")
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
        "(volcano.sh/vgpu.enabled=true; ascend=on for ascend-vnpu; none for whole-gpu).",
        json_schema_extra=_cel(
            (
                f"self.all(k, !k.startsWith('{RESERVED_LABEL_PREFIX}') && "
                f"k != '{contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL}')",
                f"nodeLabels must not set {RESERVED_LABEL_PREFIX}* keys (the operator's own) nor "
                f"{contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL} (use disableNvidiaDevicePlugin)",
            )
        ),
    )
    node_taints: list[Taint] | None = Field(
        default=None,
        alias="nodeTaints",
        max_length=MAX_NODE_TAINTS,
        description="Taints put on the pool's nodes. Unset: the mode's default "
        "(volcano.sh/vgpu=hami:NoSchedule for hami-core and mig; none otherwise). "
        "At most one taint per key and effect, as on a Node.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["key", "effect"],
        },
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
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    suspend: bool = False

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.mig) || self.mode == 'mig'",
                "spec.mig is allowed only with mode: mig",
                ".mig",
            ),
            (
                "!has(self.hamiCore) || self.mode in ['hami-core', 'mig']",
                "spec.hamiCore is allowed only with mode hami-core or mig",
                ".hamiCore",
            ),
            (
                "!has(self.ascendVnpu) || self.mode == 'ascend-vnpu'",
                "spec.ascendVnpu is allowed only with mode: ascend-vnpu",
                ".ascendVnpu",
            ),
            (
                "!(has(self.mig) && has(self.mig.partitioning) && "
                "self.mig.partitioning == 'static' && "
                "has(self.disableNvidiaDevicePlugin) && self.disableNvidiaDevicePlugin)",
                "a static MIG layout is served by NVIDIA's device plugin: "
                "disableNvidiaDevicePlugin must stay false",
                ".disableNvidiaDevicePlugin",
            ),
            (
                "self.mode != 'whole-gpu' || !has(self.nodeTaints) || size(self.nodeTaints) == 0",
                "mode whole-gpu takes no nodeTaints (the operator's taints come off)",
                ".nodeTaints",
            ),
        )
    )

    @model_validator(mode="after")
    def _blocks_fit_mode(self) -> VGPUNodePolicySpec:
        if self.mig is not None and self.mode != "mig":
            raise ValueError("spec.mig is allowed only with mode: mig")
        if self.hami_core is not None and self.mode not in ("hami-core", "mig"):
            raise ValueError("spec.hamiCore is allowed only with mode hami-core or mig")
        if self.ascend_vnpu is not None and self.mode != "ascend-vnpu":
            raise ValueError("spec.ascendVnpu is allowed only with mode: ascend-vnpu")
        if (
            self.mig is not None
            and self.mig.partitioning == "static"
            and self.disable_nvidia_device_plugin
        ):
            raise ValueError(
                "spec.disableNvidiaDevicePlugin: a static MIG layout is served by NVIDIA's "
                "device plugin: disableNvidiaDevicePlugin must stay false"
            )
        if self.mode == "whole-gpu" and self.node_taints:
            raise ValueError("spec.nodeTaints: mode whole-gpu takes no nodeTaints")
        for key in self.node_labels or {}:
            if key.startswith(RESERVED_LABEL_PREFIX) or (
                key == contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL
            ):
                raise ValueError(
                    f"spec.nodeLabels must not set {key!r}: {RESERVED_LABEL_PREFIX}* keys are the "
                    f"operator's own and {contract.GPU_OPERATOR_DEVICE_PLUGIN_LABEL} is set by "
                    "disableNvidiaDevicePlugin"
                )
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
    """A policy as read from the cluster (metadata trimmed to what the core needs)."""

    name: str
    generation: int = 1
    uid: str = ""
    deleting: bool = False
    spec: VGPUNodePolicySpec
