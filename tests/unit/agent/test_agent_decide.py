"""The agent loop's pure decisions: when to act, what to write, which Event to post."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.kit.migkit import dynamic, static
from vgpu_operator import contract
from vgpu_operator.agent import decide
from vgpu_operator.agent.apply import Outcome, Reason
from vgpu_operator.agent.decide import Memory, NodeView, Released
from vgpu_operator.models.inventory import GpuInfo, Inventory
from vgpu_operator.models.node import NodeConfig

DYN = dynamic()
DYN_TEXT = DYN.to_annotation()


def inventory(applied: NodeConfig | None = None, mig: bool = True) -> Inventory:
    gpu = GpuInfo(
        index=0,
        uuid="GPU-0",
        name="NVIDIA A100-SXM4-80GB",
        bus_id="00000000:07:00.0",
        memory_mib=81920,
        mig_capable=True,
        mig_current=mig,
        mig_pending=mig,
    )
    return Inventory(gpus=[gpu], applied=applied)


def raw_node(
    *, state: str | None = None, config: str | None = None, inv: str | None = None
) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": "n1"} | ({contract.LABEL_STATE: state} if state else {})
    annotations = {"kwok.x-k8s.io/node": "fake"}
    if config is not None:
        annotations[contract.ANN_CONFIG] = config
    if inv is not None:
        annotations[contract.ANN_INVENTORY] = inv
    meta = {"name": "n1", "uid": "u-1", "resourceVersion": "42"}
    return {"metadata": {**meta, "labels": labels, "annotations": annotations}}


def outcome(state: str = "success", steps: int = 0, **kw: Any) -> Outcome:
    reason = kw.pop("reason", Reason.APPLIED if steps else Reason.UNCHANGED)
    return Outcome(state, reason, kw.pop("message", "m"), steps_done=steps, **kw)  # type: ignore[arg-type]


def test_node_view_reads_the_contract_and_nothing_else() -> None:
    text = inventory(DYN).to_annotation()
    view = decide.node_view(raw_node(state="success", config=DYN_TEXT, inv=text))
    assert view == NodeView("n1", "u-1", "42", "success", DYN_TEXT, text)
    assert decide.node_view({"metadata": {"name": "x"}}) == NodeView("x")


def test_released_configuration_parses_or_names_the_error() -> None:
    assert decide.released(NodeView("n", config_text=DYN_TEXT)) == Released(config=DYN)
    assert not decide.released(NodeView("n")).present
    bad = decide.released(NodeView("n", config_text='{"mode": "warp-drive"}'))
    assert bad.config is None and bad.present
    assert bad.error is not None and contract.ANN_CONFIG in bad.error


def test_an_unreadable_configuration_keeps_its_error_whatever_its_text_holds() -> None:
    # A key holding NEL (U+0085) or U+2028, which str.splitlines takes for line breaks: the
    # message still says the whole field and what is wrong with it (the log escapes them).
    key = "1g.10gb\u0085forged\u20282"
    text = json.dumps(
        {"mode": "mig", "mig": {"partitioning": "static", "layout": [{"profiles": {key: 1}}]}},
        ensure_ascii=False,
    )
    error = decide.released(NodeView("n", config_text=text)).error
    assert error is not None
    assert f"mig.layout.0.profiles.`{key}`" in error, error
    assert "String should match pattern" in error, error


def test_previous_comes_from_the_inventory_and_tolerates_garbage() -> None:
    text = inventory(DYN).to_annotation()
    assert decide.previous_applied(NodeView("n", inventory_text=text)) == DYN
    assert decide.previous_applied(NodeView("n", inventory_text="{not json")) is None
    assert decide.previous_applied(NodeView("n")) is None


@pytest.mark.parametrize(
    ("acted", "acted_config", "last_state", "config", "due", "want"),
    [
        (False, None, None, DYN_TEXT, False, "start"),
        (True, DYN_TEXT, "success", DYN_TEXT, False, None),  # own writes, heartbeats
        (True, DYN_TEXT, "success", None, False, "config"),  # config removed
        (True, None, "success", DYN_TEXT, False, "config"),  # config released
        (True, DYN_TEXT, "success", DYN_TEXT, True, "resync"),
        (True, DYN_TEXT, "failed", DYN_TEXT, True, "retry"),
        (True, DYN_TEXT, "blocked", DYN_TEXT, True, "retry"),
    ],
)
def test_trigger(
    acted: bool,
    acted_config: str | None,
    last_state: str | None,
    config: str | None,
    due: bool,
    want: str | None,
) -> None:
    memory = Memory(acted=acted, acted_config=acted_config, last_state=last_state)
    view = NodeView("n", state="success", config_text=config)
    assert decide.trigger(view, memory, due=due) == want


def test_no_node_no_trigger() -> None:
    assert decide.trigger(None, Memory(), due=True) is None


def test_failed_and_blocked_nodes_retry_sooner() -> None:
    assert decide.next_delay("success", resync=300, retry=30) == 300
    assert decide.next_delay("failed", resync=300, retry=30) == 30
    assert decide.next_delay("blocked", resync=10, retry=30) == 10


def test_applying_is_written_once() -> None:
    assert decide.applying_patch(NodeView("n", state="success")) == {
        "metadata": {"labels": {contract.LABEL_STATE: "applying"}}
    }
    assert decide.applying_patch(NodeView("n", state="applying")) is None


def test_state_label_is_absent_without_a_configuration() -> None:
    assert decide.state_label("success", Released(config=DYN)) == "success"
    assert decide.state_label("failed", Released(error="bad")) == "failed"
    assert decide.state_label("success", Released()) is None


def test_terminal_patch_writes_only_the_difference() -> None:
    text = inventory(DYN).to_annotation()
    same = NodeView("n", resource_version="7", state="success", inventory_text=text)
    assert decide.terminal_patch(same, "success", text) is None
    assert decide.terminal_patch(same, "success", None) is None  # hardware unread: keep it

    applying = NodeView("n", resource_version="7", state="applying", inventory_text=text)
    assert decide.terminal_patch(applying, "success", text) == {
        "metadata": {"resourceVersion": "7", "labels": {contract.LABEL_STATE: "success"}}
    }
    newer = inventory(DYN, mig=False).to_annotation()
    assert decide.terminal_patch(same, "failed", newer) == {
        "metadata": {
            "resourceVersion": "7",
            "labels": {contract.LABEL_STATE: "failed"},
            "annotations": {contract.ANN_INVENTORY: newer},
        }
    }
    # a node without configuration: the label goes, the inventory is reported
    fresh = NodeView("n", resource_version="7", state="success")
    assert decide.terminal_patch(fresh, None, text) == {
        "metadata": {
            "resourceVersion": "7",
            "labels": {contract.LABEL_STATE: None},
            "annotations": {contract.ANN_INVENTORY: text},
        }
    }


def test_inventory_text_is_the_outcomes_inventory_or_none() -> None:
    inv = inventory(DYN)
    assert decide.inventory_text(outcome(inventory=inv)) == inv.to_annotation()
    assert decide.inventory_text(outcome()) is None


def test_events_on_change_and_new_failures_only() -> None:
    rel = Released(config=DYN)
    quiet = Memory(acted=True)
    # a resync that found everything as it was: no Event
    assert decide.event_for(outcome(), before="success", released=rel, memory=quiet) is None
    # hardware changed (a re-apply after a reboot): an Event even though the state is the same
    applied = decide.event_for(outcome(steps=3), before="success", released=rel, memory=quiet)
    assert applied is not None and (applied.type, applied.reason) == ("Normal", "Applied")
    # the state label changes (a killed agent left `applying`)
    done = decide.event_for(outcome(), before="applying", released=rel, memory=quiet)
    assert done is not None and done.reason == "AlreadyApplied"
    # a failure: once per (reason, message) in this process
    failed = outcome("failed", reason=Reason.REBOOT_REQUIRED, message="GPU 0: reboot")
    first = decide.event_for(failed, before="success", released=rel, memory=quiet)
    assert first is not None and (first.type, first.reason) == ("Warning", "RebootRequired")
    seen = Memory(acted=True, last_event=first.key)
    assert decide.event_for(failed, before="failed", released=rel, memory=seen) is None
    other = outcome("failed", reason=Reason.REBOOT_REQUIRED, message="GPU 1: reboot")
    assert decide.event_for(other, before="failed", released=rel, memory=seen) is not None
    # no configuration: the inventory is reported quietly
    assert decide.event_for(outcome(), before=None, released=Released(), memory=quiet) is None


def test_blocked_event_names_the_reason() -> None:
    blocked = outcome("blocked", reason=Reason.IN_USE, message="GPU 0 has running processes")
    spec = decide.event_for(blocked, before=None, released=Released(config=DYN), memory=Memory())
    assert spec is not None and (spec.type, spec.reason) == ("Warning", "GPUInUse")


def test_static_and_dynamic_configs_differ_as_text() -> None:
    # the trigger compares the released text: a layout change is a change
    a = static({"profiles": {"1g.10gb": 7}}).to_annotation()
    b = static({"profiles": {"1g.10gb": 6}}).to_annotation()
    memory = Memory(acted=True, acted_config=a, last_state="success")
    assert decide.trigger(NodeView("n", config_text=b), memory, due=False) == "config"
