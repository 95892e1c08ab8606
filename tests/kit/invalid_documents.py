"""Invalid VGPUNodePolicy objects whose problem is outside the spec: the name, the object's own
fields, the apiVersion. With `invalid_specs` (the spec cases), what `vgpu-operator validate`
is held to: the unit tests check that it names `field` (and `message`, when given), and the
lead's cluster test that the apiserver refuses each one too (a server-side dry-run, with
kubectl's default field validation, Strict)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vgpu_operator import contract

SPEC: dict[str, Any] = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"vgpu-test/x": "y"}}}


@dataclass(frozen=True)
class InvalidDocument:
    name: str  # the case's
    document: dict[str, Any]
    field: str  # the path the rejection names
    message: str = ""  # a fragment of the rejection


def policy(metadata: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": metadata,
        "spec": SPEC,
        **top,
    }


INVALID_DOCUMENTS: tuple[InvalidDocument, ...] = (
    # The CEL rule on the object's root: the name is the value of the policy label.
    InvalidDocument(
        "name-longer-than-63",
        policy({"name": "pool-" + "x" * 59}),  # 64 characters
        "metadata.name",
        "metadata.name must be at most 63 characters",
    ),
    InvalidDocument(
        "name-not-a-dns-subdomain",
        policy({"name": "Pool_A"}),
        "metadata.name",
        "a lowercase RFC 1123 subdomain",
    ),
    InvalidDocument("no-name", policy({}), "metadata.name", "name or generateName is required"),
    InvalidDocument(
        "unknown-top-level-field",
        policy({"name": "typo-top"}, specs={"mode": "mig"}),
        "specs",
        'unknown field "specs"',
    ),
    InvalidDocument(
        "unknown-metadata-field",
        policy({"name": "typo-meta", "lables": {"a": "b"}}),
        "metadata.lables",
        'unknown field "metadata.lables"',
    ),
    InvalidDocument(
        "bad-metadata-label",
        policy({"name": "bad-meta-label", "labels": {"team": "has space"}}),
        "metadata.labels",
    ),
    InvalidDocument(
        "no-spec",
        {k: v for k, v in policy({"name": "no-spec"}).items() if k != "spec"},
        "spec",
        "Required value",
    ),
)


def by_name(name: str) -> InvalidDocument:
    return next(d for d in INVALID_DOCUMENTS if d.name == name)


__all__ = ["INVALID_DOCUMENTS", "InvalidDocument", "by_name", "policy"]
