"""The record of the placement patch the operator put on one of HAMi's plugin DaemonSets: the
annotation `vgpu.volcano.sh/placement` on the DaemonSet, written in the same PATCH as the
placement (`controller.workload_writes`). It names the nodeSelector entries the operator set and
each toleration it added, in exactly the form it wrote them; `vgpu-operator cleanup`
(`core.cleanup.placement_revert`) takes off these and nothing else, so a person's own
nodeSelector keys and tolerations stay, even one equal to a toleration the operator would add
(the operator then added none: `core.volcano.placement.plan_placement`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vgpu_operator import contract


def toleration_key(toleration: Mapping[str, Any]) -> str:
    """One toleration, compared as written: empty fields (an empty value) do not count."""
    return json.dumps(
        {k: v for k, v in toleration.items() if v not in (None, "")},
        sort_keys=True,
        separators=(",", ":"),
    )


class PlacementRecord(BaseModel):
    """What the operator's placement patches set on a plugin DaemonSet, accumulated: every
    nodeSelector entry and toleration of every placement PATCH so far."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[dict[str, str]] = Field(default_factory=list)

    def to_annotation(self) -> str:
        return json.dumps(
            self.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":")
        )

    @classmethod
    def from_annotation(cls, raw: str | None) -> PlacementRecord:
        """The record in the annotation's value (none: empty); ValueError when it does not
        parse (pydantic's ValidationError is one)."""
        if not raw:
            return cls()
        return cls.model_validate_json(raw)

    @classmethod
    def of(cls, daemonset: Mapping[str, Any]) -> PlacementRecord:
        """The DaemonSet's record; an unreadable one counts as none (the next PATCH writes a
        readable one, `core.cleanup.placement_revert` reports it as left)."""
        annotations = (daemonset.get("metadata") or {}).get("annotations") or {}
        try:
            return cls.from_annotation(annotations.get(contract.ANN_PLACEMENT))
        except ValueError:
            return cls()

    def adding(
        self, node_selector: Mapping[str, str | None], tolerations: Iterable[Mapping[str, str]]
    ) -> PlacementRecord:
        """This record with one more PATCH's nodeSelector entries and added tolerations (an
        entry the PATCH takes off, null, leaves the record)."""
        known = {toleration_key(t) for t in self.tolerations}
        added = [dict(t) for t in self.tolerations]
        for t in tolerations:
            if toleration_key(t) not in known:
                known.add(toleration_key(t))
                added.append(dict(t))
        merged = {**self.node_selector, **node_selector}
        return PlacementRecord(
            node_selector={k: v for k, v in merged.items() if v is not None}, tolerations=added
        )
