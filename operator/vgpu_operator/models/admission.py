"""How a policy's cross-field rules are declared once: an `AdmissionRule` carries the CEL the CRD
holds (`x-kubernetes-validations`: the apiserver refuses the object) and the Python predicate the
model runs (the operator refuses a spec written before the CRD had the rule), with one field and
message. `PolicyModel` is the strict base every part of the policy derives from: it sees a spec as
the apiserver stores it (`as_stored`) and checks its `RULES` after its fields."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator


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
        """The model's error text: `<field>: <message>` (core.nodes.validate maps it to the
        path)."""
        return f"{self.field.lstrip('.')}: {self.message}" if self.field else self.message


def cel_rules(rules: tuple[AdmissionRule, ...]) -> dict[str, Any]:
    """`json_schema_extra` carrying the rules' CEL (`x-kubernetes-validations`)."""
    return {"x-kubernetes-validations": [r.schema() for r in rules]}


def failed_rule(obj: Any, rules: tuple[AdmissionRule, ...]) -> AdmissionRule | None:
    return next((r for r in rules if not r.check(obj)), None)


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


class PolicyModel(BaseModel):
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
