"""The shape of a consistency finding: what a check reports, whichever floor the check lives on.

`core.rules` (the `@rule` functions over a ClusterSnapshot) and `core.dra` (the DRA prerequisites)
both return `Finding`s; `core.findings` and `core.report` bring them to people (the
`ConfigConsistent` condition, Warning Events, `doctor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


class ObjectRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str
    name: str
    namespace: str | None = None

    def __str__(self) -> str:
        return (
            f"{self.kind} {self.namespace}/{self.name}"
            if self.namespace
            else (f"{self.kind} {self.name}")
        )

    @classmethod
    def of(cls, kind: str, obj: Mapping[str, Any]) -> ObjectRef:
        m = obj.get("metadata") or {}
        return cls(kind=kind, name=str(m.get("name", "")), namespace=m.get("namespace"))


class Finding(BaseModel):
    """One problem: `id` is the rule's id; `fixable_by_operator` says whether `enforce` mode
    fixes it (it owns the object) or only reports it."""

    model_config = ConfigDict(frozen=True)

    id: str
    severity: Severity
    objects: tuple[ObjectRef, ...]
    message: str
    fix: str
    fixable_by_operator: bool = False
