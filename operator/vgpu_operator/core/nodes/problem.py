"""A finding of the checks on a policy (`core.nodes.validate`, `core.nodes.node_hardware`,
`core.nodes.ownership`, the refusals): the field it is about and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """A finding: the spec field it is about, a CamelCase reason, what is wrong, how to fix it."""

    field: str
    reason: str
    message: str
    fix: str = ""
    node: str | None = None

    def describe(self) -> str:
        text = f"{self.field}: {self.message} ({self.reason})"
        return f"{text}; fix: {self.fix}" if self.fix else text
