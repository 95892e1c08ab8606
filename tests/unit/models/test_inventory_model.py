"""The inventory annotation (models.inventory): compact, sorted, round-trips, stays small."""

from __future__ import annotations

import json

from tests.kit.migkit import gpu, node, static
from vgpu_operator.models.inventory import Inventory, ProcessInfo

ANNOTATIONS_LIMIT = 256 * 1024  # total size of all annotations of an object


def full_h100_node() -> Inventory:
    layout = [("1g.10gb", s) for s in range(7)]
    gpus = [gpu("H100 80GB HBM3", i, instances=layout) for i in range(8)]
    return Inventory(gpus=gpus, applied=static({"profiles": {"1g.10gb": 7}}))


def test_annotation_is_compact_sorted_json_that_round_trips() -> None:
    inv = full_h100_node()
    raw = inv.to_annotation()
    assert ": " not in raw and ", " not in raw
    assert raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"))
    assert Inventory.from_annotation(raw) == inv
    assert Inventory.from_annotation("") is None


def test_eight_h100_with_every_profile_and_instance_stays_far_below_the_limit() -> None:
    raw = full_h100_node().to_annotation()
    data = json.loads(raw)
    assert len(data["gpus"]) == 8
    assert all(len(g["profiles"]) == 7 and len(g["instances"]) == 7 for g in data["gpus"])
    size = len(raw.encode())
    assert size < ANNOTATIONS_LIMIT // 8, f"{size} bytes"  # an eighth of the budget at most


def test_processes_stay_out_of_the_annotation_unless_asked() -> None:
    g = gpu("A30").model_copy(update={"processes": [ProcessInfo(pid=7, name="python")]})
    inv = node(g)
    assert "processes" not in json.loads(inv.to_annotation())["gpus"][0]
    assert json.loads(inv.to_annotation(include_processes=True))["gpus"][0]["processes"] == [
        {"name": "python", "pid": 7}
    ]


def test_lookup_helpers() -> None:
    inv = full_h100_node()
    g = inv.gpu(3)
    assert g is not None and g.index == 3
    assert inv.gpu(8) is None
    assert g.profile(19) is not None and g.profile("3g.40gb") is not None
    assert g.profile("9g.1gb") is None
    assert g.mode_settled
