"""Invalid VGPUNodePolicy specs, each with the field its rejection must name and who rejects it.

For the lead's cluster test against the real apiserver, and for the unit tests here:

- `openapi`: the CRD's OpenAPI schema (enum, range, pattern, list-map uniqueness, unknown field);
  the apiserver answers 422 naming `field`. `strict=True`: only with field validation Strict
  (kubectl's default; `?fieldValidation=Strict` on a raw request), otherwise the field is pruned.
- `cel`: a CEL rule (`x-kubernetes-validations`); 422 naming `field` and containing `message`.
- `operator`: the apiserver accepts the object; the operator reports it on the policy's status
  (condition Stalled, a `problemNodes` entry for node-level cases) naming `field`, and writes
  nothing to the node concerned. Node-level cases carry the simulated node they need (`node`:
  devcluster `NodeSpec` fields); the spec selects it by the label `vgpu-test/case: <name>`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

Catcher = Literal["openapi", "cel", "operator"]
CASE_LABEL = "vgpu-test/case"


@dataclass(frozen=True)
class InvalidSpec:
    name: str
    spec: dict[str, Any]
    field: str  # the path the rejection or the condition must name
    caught_by: Catcher
    message: str = ""  # a fragment of the rejection or condition message
    reason: str = ""  # operator cases: the problem reason on the status
    node: dict[str, Any] | None = None  # operator node-level cases: NodeSpec(**node)
    strict: bool = False

    @property
    def by_apiserver(self) -> bool:
        return self.caught_by in ("openapi", "cel")


def _sel(name: str) -> dict[str, Any]:
    return {"matchLabels": {CASE_LABEL: name}}


def _static(*layout: dict[str, Any]) -> dict[str, Any]:
    return {"partitioning": "static", "layout": list(layout)}


def _dra_static(*layout: dict[str, Any]) -> dict[str, Any]:
    return {"devices": "static-mig", "layout": list(layout)}


def _node(name: str, model: str | None, gpus: int, **extra: Any) -> dict[str, Any]:
    labels = {CASE_LABEL: name, **extra.pop("labels", {})}
    return {"name": f"case-{name}", "model": model, "gpus": gpus, "labels": labels, **extra}


_CASES: tuple[InvalidSpec, ...] = (
    # ---- OpenAPI schema ----
    InvalidSpec(
        "no-node-selector", {"mode": "hami-core"}, "spec.nodeSelector", "openapi", "Required value"
    ),
    InvalidSpec("unknown-mode", {"mode": "vgpu"}, "spec.mode", "openapi", "Unsupported value"),
    InvalidSpec(
        "priority-too-high", {"mode": "hami-core", "priority": 5000}, "spec.priority", "openapi"
    ),
    InvalidSpec(
        "split-count-zero",
        {"mode": "hami-core", "hamiCore": {"deviceSplitCount": 0}},
        "spec.hamiCore.deviceSplitCount",
        "openapi",
    ),
    InvalidSpec(
        "memory-scaling-zero",
        {"mode": "hami-core", "hamiCore": {"deviceMemoryScaling": 0}},
        "spec.hamiCore.deviceMemoryScaling",
        "openapi",
    ),
    InvalidSpec(
        "bad-taint-effect",
        {"mode": "hami-core", "nodeTaints": [{"key": "a", "effect": "NoWhere"}]},
        "spec.nodeTaints[0].effect",
        "openapi",
    ),
    InvalidSpec(
        "duplicate-taint",
        {
            "mode": "hami-core",
            "nodeTaints": [
                {"key": "a", "value": "1", "effect": "NoSchedule"},
                {"key": "a", "value": "2", "effect": "NoSchedule"},
            ],
        },
        "spec.nodeTaints[1]",
        "openapi",
        "Duplicate value",
    ),
    InvalidSpec(
        "bad-label-value",
        {"mode": "hami-core", "nodeLabels": {"team": "has space"}},
        "spec.nodeLabels.team",
        "openapi",
    ),
    InvalidSpec(
        "bad-max-unavailable",
        {"mode": "mig", "rollout": {"maxUnavailable": "lots"}},
        "spec.rollout.maxUnavailable",
        "openapi",
    ),
    InvalidSpec(
        "gpus-bad-word",
        {"mode": "mig", "mig": _static({"gpus": "some", "profiles": {"1g.10gb": 7}})},
        "spec.mig.layout[0].gpus",
        "openapi",
        "should match",
    ),
    InvalidSpec(
        "gpus-index-too-big",
        {"mode": "mig", "mig": _static({"gpus": [99], "profiles": {"1g.10gb": 7}})},
        "spec.mig.layout[0].gpus[0]",
        "openapi",
    ),
    InvalidSpec(
        "typo-in-field-name",
        {"mode": "hami-core", "hamicore": {"deviceSplitCount": 4}},
        "spec.hamicore",
        "openapi",
        "unknown field",
        strict=True,
    ),
    # ---- CEL rules ----
    InvalidSpec(
        "empty-node-selector",
        {"mode": "hami-core", "nodeSelector": {}},
        "spec.nodeSelector",
        "cel",
        "nodeSelector must not be empty",
    ),
    InvalidSpec(
        "empty-node-selector-lists",
        {"mode": "mig", "nodeSelector": {"matchLabels": {}, "matchExpressions": []}},
        "spec.nodeSelector",
        "cel",
        "nodeSelector must not be empty",
    ),
    InvalidSpec(
        "kubernetes-io-label",
        {"mode": "hami-core", "nodeLabels": {"kubernetes.io/hostname": "other"}},
        "spec.nodeLabels",
        "cel",
        "must not set keys under kubernetes.io/ or k8s.io/",
    ),
    InvalidSpec(
        "node-restriction-label",
        {"mode": "hami-core", "nodeLabels": {"node-restriction.kubernetes.io/pool": "secrets"}},
        "spec.nodeLabels",
        "cel",
        "must not set keys under kubernetes.io/ or k8s.io/",
    ),
    InvalidSpec(
        "k8s-io-label",
        {"mode": "whole-gpu", "nodeLabels": {"k8s.io/role": "gpu"}},
        "spec.nodeLabels",
        "cel",
        "must not set keys under kubernetes.io/ or k8s.io/",
    ),
    InvalidSpec(
        "k8s-io-subdomain-taint",
        {"mode": "hami-core", "nodeTaints": [{"key": "node.k8s.io/gpu", "effect": "NoSchedule"}]},
        "spec.nodeTaints",
        "cel",
        "must not use keys under kubernetes.io/ or k8s.io/",
    ),
    InvalidSpec(
        "no-execute-taint",
        {"mode": "hami-core", "nodeTaints": [{"key": "gpu", "effect": "NoExecute"}]},
        "spec.nodeTaints",
        "cel",
        "set allowNoExecute: true to mean it",
    ),
    InvalidSpec(
        "mig-manager-label-by-hand",
        {"mode": "mig", "nodeLabels": {"nvidia.com/gpu.deploy.mig-manager": "false"}},
        "spec.nodeLabels",
        "cel",
        "use disableNvidiaDevicePlugin and disableNvidiaMigManager",
    ),
    InvalidSpec(
        "mig-block-without-mig-mode",
        {"mode": "hami-core", "mig": {"partitioning": "dynamic"}},
        "spec.mig",
        "cel",
        "spec.mig is allowed only with mode: mig",
    ),
    InvalidSpec(
        "ascend-block-with-mig-mode",
        {"mode": "mig", "ascendVnpu": {"vDeviceCount": 4}},
        "spec.ascendVnpu",
        "cel",
        "spec.ascendVnpu is allowed only with mode: ascend-vnpu",
    ),
    InvalidSpec(
        "hami-block-with-whole-gpu",
        {"mode": "whole-gpu", "hamiCore": {"deviceSplitCount": 4}},
        "spec.hamiCore",
        "cel",
        "spec.hamiCore is allowed only with mode hami-core or mig",
    ),
    InvalidSpec(
        "static-layout-with-coexistence-option",
        {
            "mode": "mig",
            "disableNvidiaDevicePlugin": True,
            "mig": _static({"gpus": "all", "profiles": {"1g.10gb": 7}}),
        },
        "spec.disableNvidiaDevicePlugin",
        "cel",
        "disableNvidiaDevicePlugin must stay false",
    ),
    InvalidSpec(
        "whole-gpu-with-taints",
        {"mode": "whole-gpu", "nodeTaints": [{"key": "a", "effect": "NoSchedule"}]},
        "spec.nodeTaints",
        "cel",
        "mode whole-gpu takes no nodeTaints",
    ),
    InvalidSpec(
        "static-without-layout",
        {"mode": "mig", "mig": {"partitioning": "static"}},
        "spec.mig.layout",
        "cel",
        "a static partitioning needs a layout",
    ),
    InvalidSpec(
        "dynamic-with-layout",
        {
            "mode": "mig",
            "mig": {"partitioning": "dynamic", "layout": [{"profiles": {"1g.10gb": 7}}]},
        },
        "spec.mig.layout",
        "cel",
        "a dynamic one takes none",
    ),
    InvalidSpec(
        "dra-block-without-dra-mode",
        {"mode": "hami-core", "dra": {"devices": "whole-gpu"}},
        "spec.dra",
        "cel",
        "spec.dra is allowed only with mode: dra",
    ),
    InvalidSpec(
        "dra-static-mig-without-layout",
        {"mode": "dra", "dra": {"devices": "static-mig"}},
        "spec.dra.layout",
        "cel",
        "devices static-mig needs a layout",
    ),
    InvalidSpec(
        "dra-whole-gpu-with-layout",
        {"mode": "dra", "dra": {"devices": "whole-gpu", "layout": [{"profiles": {"1g.10gb": 7}}]}},
        "spec.dra.layout",
        "cel",
        "whole-gpu and dynamic-mig take none",
    ),
    InvalidSpec(
        "dra-too-many-slices",
        {"mode": "dra", "dra": _dra_static({"profiles": {"3g.40gb": 2, "2g.20gb": 1}})},
        "spec.dra.layout[0].profiles",
        "cel",
        "at most 7 compute slices",
    ),
    InvalidSpec(
        "dra-bad-profile-name",
        {"mode": "dra", "dra": _dra_static({"profiles": {"1g-10gb": 7}})},
        "spec.dra.layout[0].profiles",
        "cel",
        "every key must match",
    ),
    InvalidSpec(
        "dra-empty-profiles",
        {"mode": "dra", "dra": _dra_static({"gpus": "all", "profiles": {}})},
        "spec.dra.layout[0].profiles",
        "cel",
        "profiles must name at least one MIG profile",
    ),
    InvalidSpec(
        "in-without-values",
        {
            "mode": "hami-core",
            "nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "In"}]},
        },
        "spec.nodeSelector.matchExpressions[0].values",
        "cel",
        "values must be non-empty for In and NotIn",
    ),
    InvalidSpec(
        "too-many-slices",
        {"mode": "mig", "mig": _static({"profiles": {"3g.40gb": 2, "2g.20gb": 1}})},
        "spec.mig.layout[0].profiles",
        "cel",
        "at most 7 compute slices",
    ),
    InvalidSpec(
        "bad-profile-name",
        {"mode": "mig", "mig": _static({"profiles": {"1g-10gb": 7}})},
        "spec.mig.layout[0].profiles",
        "cel",
        "every key must match",
    ),
    InvalidSpec(
        "empty-profiles",
        {"mode": "mig", "mig": _static({"gpus": "all", "profiles": {}})},
        "spec.mig.layout[0].profiles",
        "cel",
        "profiles must name at least one MIG profile",
    ),
    InvalidSpec(
        "reserved-label-key",
        {"mode": "hami-core", "nodeLabels": {"vgpu.volcano.sh/policy": "other"}},
        "spec.nodeLabels",
        "cel",
        "nodeLabels must not set vgpu.volcano.sh/* keys",
    ),
    InvalidSpec(
        "device-plugin-label-by-hand",
        {"mode": "hami-core", "nodeLabels": {"nvidia.com/gpu.deploy.device-plugin": "false"}},
        "spec.nodeLabels",
        "cel",
        "use disableNvidiaDevicePlugin",
    ),
    InvalidSpec(
        "bad-label-key",
        {"mode": "hami-core", "nodeLabels": {"gpu pool": "a"}},
        "spec.nodeLabels",
        "cel",
        "every key must match",
    ),
    InvalidSpec(
        "max-unavailable-zero-percent",
        {"mode": "hami-core", "rollout": {"maxUnavailable": "0%"}},
        "spec.rollout.maxUnavailable",
        "cel",
        "maxUnavailable must be at least 1",
    ),
    # ---- caught by the operator ----
    InvalidSpec(
        "cpu-only-node",
        {"mode": "hami-core", "nodeSelector": _sel("cpu-only-node")},
        "spec.nodeSelector",
        "operator",
        "shows no NVIDIA GPU",
        reason="NoGpuEvidence",
        node=_node("cpu-only-node", None, 0),
    ),
    InvalidSpec(
        "ascend-mode-on-an-nvidia-node",
        {"mode": "ascend-vnpu", "nodeSelector": _sel("ascend-mode-on-an-nvidia-node")},
        "spec.nodeSelector",
        "operator",
        "shows no Ascend NPU",
        reason="NoGpuEvidence",
        node=_node("ascend-mode-on-an-nvidia-node", "A30", 4),
    ),
    InvalidSpec(
        "gpus-of-the-wrong-type",
        {"mode": "mig", "mig": _static({"gpus": 3, "profiles": {"1g.10gb": 7}})},
        "spec.mig.layout[0].gpus",
        "operator",
        reason="InvalidSpec",
    ),
    InvalidSpec(
        "overlapping-layouts",
        {
            "mode": "mig",
            "mig": _static(
                {"gpus": "all", "profiles": {"1g.10gb": 7}},
                {"gpus": [0], "profiles": {"7g.80gb": 1}},
            ),
        },
        "spec.mig.layout[1].gpus",
        "operator",
        "already given a layout",
        reason="LayoutOverlap",
    ),
    InvalidSpec(
        "mig-on-rtx-4090",
        {"mode": "mig", "nodeSelector": _sel("mig-on-rtx-4090")},
        "spec.mode",
        "operator",
        "without MIG support",
        reason="MigNotSupported",
        node=_node("mig-on-rtx-4090", "RTX-4090", 2),
    ),
    InvalidSpec(
        "profile-the-model-lacks",
        {
            "mode": "mig",
            "nodeSelector": _sel("profile-the-model-lacks"),
            "mig": _static({"gpus": "all", "profiles": {"1g.10gb": 4}}),
        },
        "spec.mig.layout[0].profiles",
        "operator",
        "has no MIG profile 1g.10gb",
        reason="UnknownMigProfile",
        node=_node("profile-the-model-lacks", "A30", 4),
    ),
    InvalidSpec(
        "layout-too-big-for-the-memory",
        {
            "mode": "mig",
            "nodeSelector": _sel("layout-too-big-for-the-memory"),
            "mig": _static({"gpus": "all", "profiles": {"1g.20gb": 4, "1g.10gb": 1}}),
        },
        "spec.mig.layout[0].profiles",
        "operator",
        "does not fit",
        reason="LayoutDoesNotFit",
        node=_node("layout-too-big-for-the-memory", "A100-SXM4-80GB", 8),
    ),
    InvalidSpec(
        "gpu-index-the-node-lacks",
        {
            "mode": "mig",
            "nodeSelector": _sel("gpu-index-the-node-lacks"),
            "mig": _static({"gpus": [0, 5], "profiles": {"4g.24gb": 1}}),
        },
        "spec.mig.layout[0].gpus",
        "operator",
        "has 4 GPUs",
        reason="GpuIndexOutOfRange",
        node=_node("gpu-index-the-node-lacks", "A30", 4),
    ),
    InvalidSpec(
        "taint-colliding-with-the-users",
        {"mode": "hami-core", "nodeSelector": _sel("taint-colliding-with-the-users")},
        "spec.nodeTaints[0]",
        "operator",
        "not set by the operator",
        reason="TaintCollision",
        node=_node(
            "taint-colliding-with-the-users",
            "A100-SXM4-80GB",
            8,
            taints=({"key": "volcano.sh/vgpu", "value": "mine", "effect": "NoSchedule"},),
        ),
    ),
    InvalidSpec(
        "label-colliding-with-the-users",
        {"mode": "hami-core", "nodeSelector": _sel("label-colliding-with-the-users")},
        "spec.nodeLabels['volcano.sh/vgpu.enabled']",
        "operator",
        "not set by the operator",
        reason="LabelCollision",
        node=_node(
            "label-colliding-with-the-users",
            "H100-80GB-HBM3",
            8,
            labels={"volcano.sh/vgpu.enabled": "false"},
        ),
    ),
)


# Every case selects only the nodes labelled with its name (none, unless it brings its node):
# a spec without a selector is refused for that alone (the case above says so).
INVALID_SPECS: tuple[InvalidSpec, ...] = tuple(
    c
    if "nodeSelector" in c.spec or c.name == "no-node-selector"
    else replace(c, spec={"nodeSelector": _sel(c.name), **c.spec})
    for c in _CASES
)


def by_name(name: str) -> InvalidSpec:
    return next(s for s in INVALID_SPECS if s.name == name)


__all__ = ["CASE_LABEL", "INVALID_SPECS", "InvalidSpec", "by_name"]
