"""Verification after apply (core.mig.verify): every difference is reported, nothing on a match."""

from __future__ import annotations

from tests.kit.migkit import config, dynamic, gpu, node, static
from vgpu_operator.core.mig.verify import verify

A100 = "A100-SXM4-80GB"


def test_a_matching_node_has_no_difference() -> None:
    inv = node(gpu(A100, instances=[("3g.40gb", 0), ("3g.40gb", 4)]))
    assert verify(inv, static({"profiles": {"3g.40gb": 2}}), None) == []


def test_missing_instances_are_reported_with_counts() -> None:
    inv = node(gpu(A100, instances=[("3g.40gb", 4)]))
    (d,) = verify(inv, static({"profiles": {"3g.40gb": 2}}), None)
    assert str(d) == "GPU 0: instances: expected {3g.40gb: 2}, observed {3g.40gb: 1}"


def test_applied_successfully_without_compute_instances_is_not_success() -> None:
    # mig-parted#18: "applied successfully" while the devices are absent
    g = gpu(A100, instances=[("7g.80gb", 0)])
    bare = g.model_copy(update={"instances": [g.instances[0].model_copy(update={"cis": []})]})
    (d,) = verify(node(bare), static({"profiles": {"7g.80gb": 1}}), None)
    assert d.what == "compute instances of GPU instance 0"
    assert d.observed == "none"


def test_pending_mode_is_a_difference() -> None:
    inv = node(gpu(A100, mig=False, pending=True))
    diffs = {d.what: (d.expected, d.observed) for d in verify(inv, dynamic(), None)}
    assert diffs == {"MIG mode": ("Enabled", "Disabled")}
    off = node(gpu(A100, mig=True, pending=False))
    diffs = {d.what: (d.expected, d.observed) for d in verify(off, config("hami-core"), None)}
    assert diffs == {"MIG mode": ("Disabled", "Enabled")}


def test_dynamic_switch_expects_no_leftovers_but_later_ignores_instances() -> None:
    inv = node(gpu(A100, instances=[("1g.10gb", 6)]))
    was = static({"profiles": {"1g.10gb": 1}})
    (d,) = verify(inv, dynamic(), was)
    assert (d.what, d.expected) == ("instances", "none")
    assert verify(inv, dynamic(), dynamic()) == []


def test_skipped_gpus_and_invalid_configs() -> None:
    inv = node(gpu(A100, 0, mig=False), gpu(A100, 1, mig=False))
    assert {d.gpu for d in verify(inv, dynamic(), None, skip={1})} == {0}
    (bad,) = verify(node(gpu("RTX 4090", mig=False)), dynamic(), None)
    assert bad.what == "configuration"
