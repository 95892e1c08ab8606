"""The node agent's decisions, as pure functions over plain data (agent.loop does the I/O).

- when to act: at start, when the released configuration (`vgpu.volcano.sh/config`) differs from
  the one the agent last acted on, and when the resync (or, after a failure, the retry) is due.
  The agent's own writes touch only the state label and the inventory annotation, so they never
  trigger an action;
- what to write: `applying` only when the plan changes the hardware; then one PATCH with the
  terminal state and the inventory, and none when the node already says both;
- which Event to post: on a hardware change, a state change, or a failure not reported yet by
  this process; never one per resync;
- whether another MIG manager owns the node: the GPU Operator's mig-manager or HAMi's own device
  plugin, as the node's labels and annotations show them (`core.nodes.gpu_owners`; one MIG
  manager per GPU: the agent then applies no static layout there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from vgpu_operator import contract
from vgpu_operator.agent.apply import Outcome
from vgpu_operator.core.nodes.gpu_owners import OtherOwner, other_owners
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig

COMPONENT = "vgpu-operator-agent"
APPLYING = "applying"


@dataclass(frozen=True)
class NodeView:
    """The part of the agent's Node the loop reads."""

    name: str
    uid: str = ""
    resource_version: str = ""
    state: str | None = None  # the state label
    config_text: str | None = None  # the released configuration, verbatim
    inventory_text: str | None = None  # the inventory the agent reported last, verbatim
    other_owners: tuple[OtherOwner, ...] = ()  # who else drives MIG here (core.nodes.gpu_owners)


def node_view(node: Mapping[str, Any]) -> NodeView:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return NodeView(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        state=labels.get(contract.LABEL_STATE),
        config_text=annotations.get(contract.ANN_CONFIG) or None,
        inventory_text=annotations.get(contract.ANN_INVENTORY) or None,
        other_owners=other_owners(labels, annotations),
    )


def mig_manager_block(view: NodeView, released: Released) -> str | None:
    """Why the agent applies nothing to this node, or None: a static MIG layout is released and
    another MIG owner is found here (the GPU Operator's mig-manager applies its own layout, HAMi's
    own plugin creates and destroys instances: two MIG managers on one GPU destroy each other's
    instances)."""
    config = released.config
    mig = config.gpu_mig if config is not None else None
    if not view.other_owners or mig is None or mig.partitioning != "static":
        return None
    owner = view.other_owners[0]
    more = "".join(f"; also {o.said}: {o.fix}" for o in view.other_owners[1:])
    return (
        f"{owner.said} and owns its MIG layout, so the agent applies no static layout here (one "
        f"MIG manager per GPU). Fix: {owner.fix}{more}"
    )


@dataclass(frozen=True)
class Released:
    """The released configuration: None when there is none; `error` when it does not parse."""

    config: NodeConfig | None = None
    error: str | None = None

    @property
    def present(self) -> bool:
        return self.config is not None or self.error is not None


def released(view: NodeView) -> Released:
    try:
        return Released(config=NodeConfig.from_annotation(view.config_text))
    except (ValidationError, ValueError) as exc:
        # "\n" only: str.splitlines also breaks at NEL, U+2028 and the like, which the text of
        # the annotation (a key, quoted in the error) may hold; the log escapes them.
        first = str(exc).split("\n")
        detail = "; ".join(line.strip() for line in first[:3]) if first else type(exc).__name__
        return Released(error=f"cannot read the annotation {contract.ANN_CONFIG}: {detail}")


def previous_applied(view: NodeView) -> NodeConfig | None:
    """The configuration the agent last applied, from its own inventory annotation (None when
    there is none or it does not parse: the planner then assumes nothing)."""
    try:
        inventory = Inventory.from_annotation(view.inventory_text)
    except (ValidationError, ValueError):
        return None
    return inventory.applied if inventory is not None else None


# --- when to act ------------------------------------------------------------------------------


@dataclass
class Memory:
    """What the loop remembers between actions (one process; a restart starts afresh)."""

    acted: bool = False
    acted_config: str | None = None  # the config text of the last action
    last_state: str | None = None  # the outcome state of the last action
    # (state, reason, message) of the last Event this process posted
    last_event: tuple[str, str, str] | None = None


Trigger = Literal["start", "config", "resync", "retry"]


def trigger(view: NodeView | None, memory: Memory, *, due: bool) -> Trigger | None:
    """Why the agent should act now, or None: the first time, when the released configuration
    changed, or when the resync/retry is due. Nothing else in the Node (its own writes, kubelet
    heartbeats, the controller's labels) is a reason."""
    if view is None:
        return None  # the Node is gone (or not created yet): nothing to act on
    if not memory.acted:
        return "start"
    if view.config_text != memory.acted_config:
        return "config"
    if due:
        return "retry" if memory.last_state in ("failed", "blocked") else "resync"
    return None


def next_delay(state: str | None, *, resync: float, retry: float) -> float:
    """Seconds until the next unprompted action: a failed or blocked node retries sooner (the
    processes may have ended, the holder of the GPU may be gone), a healthy one resyncs."""
    if state in ("failed", "blocked"):
        return min(retry, resync)
    return resync


# --- what to write ----------------------------------------------------------------------------


def applying_patch(view: NodeView) -> dict[str, Any] | None:
    """The PATCH that says the hardware is being changed (None when the label says so)."""
    if view.state == APPLYING:
        return None
    return {"metadata": {"labels": {contract.LABEL_STATE: APPLYING}}}


def state_label(outcome_state: str, released: Released) -> str | None:
    """The terminal state label: the outcome's state for a released configuration; absent on a
    node with no configuration (there is nothing to report a state of, only the inventory)."""
    return outcome_state if released.present else None


def inventory_text(outcome: Outcome) -> str | None:
    """The inventory annotation to write (None: keep the one there, the hardware was not read)."""
    return outcome.inventory.to_annotation() if outcome.inventory is not None else None


def terminal_patch(
    view: NodeView, state: str | None, inventory: str | None
) -> dict[str, Any] | None:
    """One merge PATCH with the state label and the inventory annotation, only the parts that
    differ; None when the node already says both. It carries the resourceVersion it was
    computed from, so a Node that changed meanwhile is read again (409)."""
    labels: dict[str, str | None] = {}
    if view.state != state:
        labels[contract.LABEL_STATE] = state  # None removes the label
    annotations: dict[str, str] = {}
    if inventory is not None and inventory != view.inventory_text:
        annotations[contract.ANN_INVENTORY] = inventory
    if not labels and not annotations:
        return None
    metadata: dict[str, Any] = {}
    if view.resource_version:
        metadata["resourceVersion"] = view.resource_version
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata}


# --- Events -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventSpec:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.type, self.reason, self.message)


def event_for(
    outcome: Outcome, *, before: str | None, released: Released, memory: Memory
) -> EventSpec | None:
    """The Event to post about an action, or None.

    Posted when the hardware changed, when the state label changes (`before` is the label as the
    action found it), or on a failure or block this process has not reported with the same
    reason and message. A node without a configuration only gets Events for failures."""
    bad = outcome.state in ("failed", "blocked")
    spec = EventSpec(
        type="Warning" if bad else "Normal",
        reason=outcome.event_reason,
        message=outcome.message or str(outcome.reason),
    )
    if bad:
        return spec if spec.key != memory.last_event else None
    if outcome.steps_done > 0:
        return spec
    if released.present and before != outcome.state:
        return spec
    return None
