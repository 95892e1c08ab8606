"""The operator config's `policyKeys`: the node label and taint keys policies may ask for.

The chart renders the one value `config.policyKeys` into the operator configuration and into the
controller's admission policy (charts/vgpu-operator/templates/_nodekeys.tpl), so the operator
refuses a policy the apiserver would refuse the node writes of (`core.nodes.policy_keys`). An
entry is a key (`ascend`, `example.com/pool`) or a prefix ending in `/` that covers every key
under it (`volcano.sh/` covers `volcano.sh/vgpu`, not `vgpu.volcano.sh/x`). Keys under
`kubernetes.io/` or `k8s.io/` (and their subdomains) are Kubernetes' own: no entry may name them
(a policy cannot ask for them either, `models.policy`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from vgpu_operator.models.config_refs import ConfigModel, cross_field_error, fix_hint
from vgpu_operator.models.labels import LABEL_KEY_PATTERN, system_key

# A prefix entry: a DNS subdomain and `/` (the prefix part of a label key).
KEY_PREFIX_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/$"
MAX_ENTRIES = 64

PolicyKeyEntry = Annotated[
    str,
    Field(
        pattern=f"({LABEL_KEY_PATTERN})|({KEY_PREFIX_PATTERN})",
        max_length=317,
        json_schema_extra=fix_hint(
            "use a label key ([prefix/]name, e.g. example.com/pool) or a prefix ending in '/' "
            "(e.g. example.com/)"
        ),
    ),
]


class PolicyKeys(ConfigModel):
    """What the pools' `nodeLabels` and `nodeTaints` may use. The node contract's own keys
    (`vgpu.volcano.sh/policy`, ...) and the GPU Operator's switches are the operator's and need
    no entry."""

    labels: list[PolicyKeyEntry] = Field(
        default_factory=list,
        max_length=MAX_ENTRIES,
        json_schema_extra=fix_hint(
            f"list at most {MAX_ENTRIES} label keys or prefixes ending in '/', e.g. "
            "[volcano.sh/, ascend]"
        ),
    )
    taints: list[PolicyKeyEntry] = Field(
        default_factory=list,
        max_length=MAX_ENTRIES,
        json_schema_extra=fix_hint(
            f"list at most {MAX_ENTRIES} taint keys or prefixes ending in '/', e.g. [volcano.sh/]"
        ),
    )

    @model_validator(mode="after")
    def _not_kubernetes_keys(self) -> PolicyKeys:
        for field, entries in (("labels", self.labels), ("taints", self.taints)):
            for i, entry in enumerate(entries):
                if system_key(entry):
                    raise cross_field_error(
                        f"{field}[{i}]",
                        f"{entry!r} is under kubernetes.io/ or k8s.io/: Kubernetes' own keys, "
                        "which no policy may set",
                        "remove it (list your own keys or prefixes)",
                    )
        return self
