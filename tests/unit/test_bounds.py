"""`vgpu_operator.bounds`: a GPU count label is a number only within what a node may have, and
none of the review's hostile values (a 63-digit count, 10^12, 10^8, 200000) is ever converted
into anything large."""

from __future__ import annotations

import time

import pytest

from tests.kit import hostile
from vgpu_operator import bounds
from vgpu_operator.models.policy_modes import FilterDevices


@pytest.mark.parametrize(
    ("label", "count"),
    [("0", 0), ("1", 1), ("8", 8), (" 8 ", 8), ("64", 64), ("0064", 64)],
)
def test_a_count_within_bounds_is_read(label: str, count: int) -> None:
    assert bounds.gpu_count(label) == count
    assert bounds.count_out_of_bounds(label) is None


# The review's cases node04, node05 and node09 (the label of a node with a released configuration
# and no inventory), and the ones around them.
HOSTILE = [*hostile.GPU_COUNTS, "65", "1" * 5000, "-5"]


@pytest.mark.parametrize("label", HOSTILE)
def test_a_count_out_of_bounds_is_not_read_and_says_why(label: str) -> None:
    started = time.perf_counter()
    assert bounds.gpu_count(label) is None
    why = bounds.count_out_of_bounds(label)
    assert time.perf_counter() - started < 0.1
    assert why is not None
    assert (
        "negative" if label.startswith("-") else f"more than the {bounds.MAX_GPUS_PER_NODE}"
    ) in why
    assert len(why) < 120  # a long value is shortened, not repeated


@pytest.mark.parametrize("label", ["", "eight", "8.0", "1e3", "+3", "٣", "-0"])
def test_what_is_not_a_count_is_absent_not_out_of_bounds(label: str) -> None:
    assert bounds.gpu_count(label) is None
    assert bounds.count_out_of_bounds(label) is None
    assert bounds.gpu_count(None) is None


def test_the_bounds_leave_room_for_what_is_real() -> None:
    assert bounds.MAX_GPUS_PER_NODE >= 16  # DGX-2 / HGX-2
    # the policy's filterDevices index range is the same bound
    FilterDevices(index=[bounds.MAX_GPUS_PER_NODE - 1])
    with pytest.raises(ValueError, match="less than or equal to 63"):
        FilterDevices(index=[bounds.MAX_GPUS_PER_NODE])
    # a node cannot fill the ConfigMap on its own, and sixty of them still fit
    assert 60 * bounds.MAX_NODE_ENTRY_BYTES < bounds.CONFIGMAP_DATA_LIMIT
