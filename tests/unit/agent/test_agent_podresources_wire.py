"""The hand decoder of the kubelet's ListPodResourcesResponse against protobuf's own encoding of
the pinned api.proto (tests/kit/podresources.py), and what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kit.podresources import (
    PROTO,
    SOURCE,
    Held,
    api_pb2,
    pinned_sha256,
    proto_sha256,
    response,
)
from vgpu_operator.agent.podresources_wire import (
    METHOD,
    Allocation,
    WireError,
    decode_list_response,
)


def test_the_proto_is_the_pinned_upstream_copy() -> None:
    assert proto_sha256() == pinned_sha256()
    text = PROTO.read_text()
    assert SOURCE.startswith("kubernetes/kubelet@v0.35.4:")
    assert "package v1;" in text and "service PodResourcesLister" in text
    assert "rpc List(ListPodResourcesRequest) returns (ListPodResourcesResponse) {}" in text
    assert METHOD == "/v1.PodResourcesLister/List"
    # the request the agent sends: an empty message encodes as no bytes
    assert api_pb2().ListPodResourcesRequest().SerializeToString() == b""


def test_devices_and_claims_are_read_the_rest_skipped() -> None:
    held = [
        Held("train", "nvidia.com/gpu", ["GPU-a", "GPU-b"]),
        Held("train", "nvidia.com/mig-1g.10gb", ["MIG-c"], container="side"),
        Held("infer", "volcano.sh/vgpu-number", ["GPU-a-3"], namespace="ml"),
    ]
    got = decode_list_response(
        response(held, dra=[("claims", "gpu.nvidia.com", "gpu-0")]).SerializeToString()
    )
    assert got == [
        Allocation("default", "train", "main", "nvidia.com/gpu", ("GPU-a", "GPU-b")),
        Allocation("default", "train", "side", "nvidia.com/mig-1g.10gb", ("MIG-c",)),
        Allocation("ml", "infer", "main", "volcano.sh/vgpu-number", ("GPU-a-3",)),
        Allocation("default", "claims", "main", "gpu.nvidia.com", ("node-0/gpu-0",), dra=True),
    ]
    assert got[2].pod_ref == "ml/infer"
    assert decode_list_response(b"") == []


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(_names, _names, _names, st.lists(_names, min_size=1, max_size=3)), max_size=5
    )
)
def test_any_answer_protobuf_encodes_decodes_the_same(
    rows: list[tuple[str, str, str, list[str]]],
) -> None:
    held = [Held(pod, resource, devices, container=c) for pod, c, resource, devices in rows]
    got = decode_list_response(response(held).SerializeToString())
    pairs = {(a.pod, a.container, a.resource, a.device_ids) for a in got}
    assert pairs == {(h.pod, h.container, h.resource, tuple(h.devices)) for h in held}


def test_fields_a_newer_kubelet_adds_are_skipped() -> None:
    body = response([Held("p", "nvidia.com/gpu", ["GPU-a"])]).SerializeToString()
    # field 9 of each kind: varint, fixed64, length-delimited, fixed32, appended at the top
    extra = b"\x48\x01" + b"\x49" + bytes(8) + b"\x4a\x02hi" + b"\x4d" + bytes(4)
    (a,) = decode_list_response(body + extra)
    assert a.device_ids == ("GPU-a",)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x0a\x05abc",  # a length past the end
        b"\x0a",  # a key and no length
        b"\x08\x01",  # pod_resources as a varint
        b"\x0b",  # a group (wire type 3)
        b"\x00\x00",  # field number 0
        b"\x0a\x04\x0a\x02\xff\xfe",  # a pod name that is not UTF-8
        b"\x0a\x80",  # a varint cut short
    ],
)
def test_malformed_answers_raise(raw: bytes) -> None:
    with pytest.raises(WireError):
        decode_list_response(raw)
