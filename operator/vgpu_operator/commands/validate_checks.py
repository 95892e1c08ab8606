"""What `vgpu-operator validate` checks in one document, without a cluster.

A VGPUNodePolicy as the apiserver checks it, then as the operator does:

- the object: `apiVersion`, no unknown top-level or `metadata` field (kubectl's default field
  validation, Strict), a name (or generateName) that is a DNS-1123 subdomain, valid labels and
  annotations, a `spec`;
- the spec against the models the CRD is generated from (crdgen): the OpenAPI schema's types,
  enums, bounds and patterns, and every CEL rule (`x-kubernetes-validations`), each mirrored by
  its `AdmissionRule`'s Python predicate (models.admission) or, for a map's key pattern, by the
  key's pattern in the model; a problem from a CEL rule carries that rule's expression;
- what the CRD cannot express and the operator refuses after the apiserver took the policy: a
  value of a type the `gpus` union does not name (crdgen: a typeless node), overlapping static
  layouts (core.nodes.validate.spec_problems). Nothing here reads a node: the problems a policy
  has only on some node's hardware show on its status once applied.

An operator configuration as the controller loads it (models.config), alone (the `--config`
file) or as the Helm chart's `config:` value; and a valid policy against the `policyKeys` of a
configuration given beside it (`check_policy_keys`: the label and taint keys the operator would
refuse it for, core.nodes.policy_keys).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.commands.validate_spec import (
    Problem,
    dotted,
    list_map_duplicates,
    policy_schema,
    spec_errors,
    unknown_field,
)
from vgpu_operator.core.nodes.policy_keys import unlisted_keys
from vgpu_operator.core.nodes.validate import parse_policy, spec_problems
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.config_errors import validation_issues
from vgpu_operator.models.config_refs import DNS_SUBDOMAIN
from vgpu_operator.models.labels import valid_label_key, valid_label_value
from vgpu_operator.models.policy import VGPUNodePolicy, VGPUNodePolicySpec
from vgpu_operator.models.policy_keys import PolicyKeys

# ObjectMeta's fields (kubernetes/kubernetes@v1.35.4:staging/src/k8s.io/apimachinery/pkg/apis/
# meta/v1/types.go): with field validation Strict the apiserver refuses any other under
# `metadata` of a custom resource (GetObjectMetaWithOptions with ReturnUnknownFieldPaths,
# kubernetes/kubernetes@v1.35.4:staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
# customresource_handler.go).
OBJECT_META_FIELDS = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
        "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
        "labels", "annotations", "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN)
DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)  # the apiserver's wording: kubernetes/kubernetes@v1.35.4:staging/src/k8s.io/apimachinery/
# pkg/util/validation/validation.go
# generateName + 5 random characters, the prefix cut to 63 - 5 (kubernetes/kubernetes@v1.35.4:
# staging/src/k8s.io/apiserver/pkg/storage/names/generate.go)
GENERATED_SUFFIX = 5


# ---- a policy --------------------------------------------------------------------------------


def check_policy(doc: Mapping[str, Any]) -> list[Problem]:
    """Every problem of a VGPUNodePolicy document (a mapping whose kind is VGPUNodePolicy)."""
    problems = list(_object_problems(doc))
    name, meta_problems = _name(doc.get("metadata"))
    problems += meta_problems
    spec: VGPUNodePolicySpec | None = None
    if doc.get("spec") is None:
        problems.append(
            Problem(
                "spec", "Required value", "add the spec (kubectl explain vnp.spec)", "apiserver"
            )
        )
    else:
        duplicates = list_map_duplicates(doc["spec"])
        problems += duplicates
        try:
            spec = VGPUNodePolicySpec.model_validate(doc["spec"])
        except ValidationError as exc:
            # The models' own uniqueness checks say what the list-maps above said.
            said = {d.field.rsplit("[", 1)[0] for d in duplicates}
            problems += [p for p in spec_errors(exc, doc["spec"]) if p.field not in said]
    if name is not None:
        # Unvalidated, and without a spec when it did not validate: a rule reading the spec
        # is then skipped (the spec's own problems are reported above).
        fields: dict[str, Any] = {"name": name} if spec is None else {"name": name, "spec": spec}
        policy = VGPUNodePolicy.model_construct(**fields)
        for rule in VGPUNodePolicy.RULES:
            try:
                holds = rule.check(policy)
            except AttributeError:  # a rule reading a spec that did not validate
                continue
            if not holds:
                field = rule.field.lstrip(".")
                fix = f"shorten {field}" if field == "metadata.name" else f"correct {field}"
                problems.append(Problem(field, rule.message, fix, "apiserver", rule.cel))
    if spec is not None:
        problems += [
            Problem(p.field, f"{p.message} ({p.reason})", p.fix, "operator")
            for p in spec_problems(spec)
        ]
    return problems


def _object_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    version = doc.get("apiVersion")
    if version != contract.API_VERSION:
        yield Problem(
            "apiVersion",
            "Required value"
            if version is None
            else f"{version!r} is not served: the CRD serves {contract.API_VERSION}",
            f"write apiVersion: {contract.API_VERSION}",
            "apiserver",
        )
    allowed = sorted(policy_schema()["properties"])
    for key in doc:
        if key not in allowed:
            yield unknown_field(dotted("", [key]), allowed)


def _name(meta: Any) -> tuple[str | None, list[Problem]]:
    """The name the apiserver would give the object (None: it has none) and the problems of
    its metadata."""
    if not isinstance(meta, Mapping):
        what = "Required value" if meta is None else "must be an object"
        return None, [Problem("metadata", what, "add metadata.name", "apiserver")]
    problems = [
        unknown_field(dotted("metadata", [k]), sorted(OBJECT_META_FIELDS))
        for k in meta
        if k not in OBJECT_META_FIELDS
    ]
    problems += _string_map(meta.get("labels"), "metadata.labels", label_values=True)
    problems += _string_map(meta.get("annotations"), "metadata.annotations", label_values=False)
    name, generate = meta.get("name"), meta.get("generateName")
    if not name and isinstance(generate, str) and generate:
        name = generate[: 63 - GENERATED_SUFFIX] + "x" * GENERATED_SUFFIX
    if not name:
        problems.append(
            Problem(
                "metadata.name",
                "name or generateName is required",
                "give the policy a name (metadata.name), e.g. a100-pool",
                "apiserver",
            )
        )
        return None, problems
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        problems.append(
            Problem(
                "metadata.name",
                f"{name!r}: {DNS_SUBDOMAIN_MESSAGE}",
                "use lower case letters, digits, '-' and '.', starting and ending with a "
                "letter or digit (e.g. a100-pool)",
                "apiserver",
            )
        )
    return (name if isinstance(name, str) else None), problems


def _string_map(value: Any, field: str, *, label_values: bool) -> list[Problem]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [
            Problem(field, "must be a map of strings", f"write {field} as key: value", "apiserver")
        ]
    problems = []
    for key, item in value.items():
        at = dotted(field, [key])
        if not valid_label_key(key):
            problems.append(
                Problem(
                    at,
                    "not a valid key: [prefix/]name, the name at most 63 characters of "
                    "letters, digits, '-', '_' and '.'",
                    "correct the key",
                    "apiserver",
                )
            )
        if not isinstance(item, str):
            problems.append(Problem(at, "must be a string", "quote the value", "apiserver"))
        elif label_values and not valid_label_value(item):
            problems.append(
                Problem(
                    at,
                    f"{item!r} is not a valid label value (at most 63 characters of letters, "
                    "digits, '-', '_' and '.', starting and ending with a letter or digit)",
                    "correct the value",
                    "apiserver",
                )
            )
    return problems


# ---- the operator configuration -------------------------------------------------------------


def check_config(raw: Any, prefix: str = "") -> list[Problem]:
    """The problems of an operator configuration (`prefix`: where it sits in the file, e.g.
    `config` in the chart's values)."""
    where = prefix or "<config>"
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        return [
            Problem(
                where,
                f"must be a mapping of settings, not {type(raw).__name__}",
                "write the settings as 'key: value' lines",
                "operator",
            )
        ]
    try:
        OperatorConfig.model_validate(dict(raw))
    except ValidationError as exc:
        issues = validation_issues(exc, OperatorConfig)
    else:
        return []
    known = {f.alias or n for n, f in OperatorConfig.model_fields.items()}
    values_hint = not prefix and not (known & set(raw))
    problems = []
    for issue in issues:
        field = where if issue.path == "<config>" else f"{prefix}.{issue.path}".lstrip(".")
        fix = issue.fix
        if values_hint:
            fix += "; a Helm values file holds the operator configuration under its `config:` key"
        problems.append(Problem(field, issue.message, fix, "operator"))
    return problems


# ---- a policy against the configuration given beside it ---------------------------------------


def config_policy_keys(raw: Any) -> PolicyKeys | None:
    """The `policyKeys` of a valid operator configuration; None: it is invalid, or sets none."""
    if not isinstance(raw, Mapping):
        return None
    try:
        return OperatorConfig.model_validate(dict(raw)).policy_keys
    except ValidationError:
        return None


def check_policy_keys(doc: Mapping[str, Any], keys: PolicyKeys, where: str) -> list[Problem]:
    """The label and taint keys a valid policy asks for that `keys` (the operator configuration
    at `where`) does not list: the operator refuses the policy for them, as the controller,
    `plan` and `doctor` do (core.nodes.policy_keys)."""
    parsed = parse_policy(doc)
    if not parsed.usable or parsed.policy is None:
        return []
    return [
        Problem(p.field, f"{p.message} (the operator configuration at {where})", p.fix, "operator")
        for p in unlisted_keys(parsed.policy, keys)
    ]
