"""The operator configuration's record of the chart's admission policies (`admissionPolicies`).

The Helm chart renders ValidatingAdmissionPolicies and their bindings
(charts/vgpu-operator/templates/admission-policies.yaml) and writes one hash of that rendering
into each of them (the annotation `vgpu.volcano.sh/admission-policies-hash`) and here, with their
names: the controller then checks that the objects in the cluster are the ones rendered with
its configuration, and enforced, before it writes (core.admission.verdict). Written by the
chart, not by hand.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from vgpu_operator.models.config_refs import DNS_SUBDOMAIN, ConfigModel, fix_hint

# The hash the chart renders: sha256, lower-case hex (Sprig's `sha256sum`).
HASH_PATTERN = r"^[0-9a-f]{64}$"

PolicyName = Annotated[
    str,
    Field(
        pattern=DNS_SUBDOMAIN,
        max_length=253,
        json_schema_extra=fix_hint("use the name of a ValidatingAdmissionPolicy"),
    ),
]


class AdmissionPoliciesRef(ConfigModel):
    """The chart's admission policies: each name is a ValidatingAdmissionPolicy and its
    ValidatingAdmissionPolicyBinding (the chart gives both the same name), and `hash` the one
    every one of them carries."""

    hash: str = Field(
        pattern=HASH_PATTERN,
        json_schema_extra=fix_hint(
            "leave it to the chart: it renders the sha256 of admission-policies.yaml here"
        ),
    )
    names: list[PolicyName] = Field(
        min_length=1,
        max_length=16,
        json_schema_extra=fix_hint("leave it to the chart: it lists the policies it renders"),
    )
