"""The DRA driver double: the ResourceSlices and DeviceClasses it builds from the fake
nvidia-smi's state, checked against what kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 announces
(device names, attributes, capacities, one pool per node). Instances are made by the fake itself
(`mig -cgi ... -C`), so placements and UUIDs are the fake's own."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.kit.smi_samples import InProcessSmi
from vgpu_devcluster import dra_driver as dra
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.models.gpu_catalog import MIG_MODELS

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def names(devices: list[dict[str, Any]]) -> list[str]:
    return [d["name"] for d in devices]


def by_name(devices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in devices}


def test_mig_off_one_pool_named_after_the_node_with_one_device_per_gpu(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-80GB", 2, node="node-a")
    state = fs.load(fake.path)
    (rs,) = dra.resource_slices("node-a", state, node_uid="uid-1")
    assert rs["apiVersion"] == "resource.k8s.io/v1" and rs["kind"] == "ResourceSlice"
    assert rs["metadata"] == {
        "generateName": "00000-gpu.nvidia.com-node-a-",
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": "node-a",
                "uid": "uid-1",
                "controller": True,
            }
        ],
    }
    spec = rs["spec"]
    assert set(spec) == {"driver", "pool", "nodeName", "devices"}  # no counters, no selectors
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    assert names(spec["devices"]) == ["gpu-0", "gpu-1"]
    assert spec["devices"][0] == {
        "name": "gpu-0",
        "attributes": {
            "architecture": {"string": "Ampere"},
            "brand": {"string": "Nvidia"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "cudaDriverVersion": {"version": "12.4.0"},
            "driverVersion": {"version": "550.90.7"},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:07:00.0"},
            "type": {"string": "gpu"},
            "uuid": {"string": state["gpus"][0]["uuid"]},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
    assert spec["devices"][1]["attributes"]["resource.kubernetes.io/pciBusID"] == {
        "string": "0000:0f:00.0"
    }
    assert "consumesCounters" not in spec["devices"][0]


def test_without_a_node_uid_no_owner_reference_and_the_generation_given(fake: InProcessSmi) -> None:
    fake.init("A30", 1)
    (rs,) = dra.resource_slices("n", fs.load(fake.path), generation=4)
    assert "ownerReferences" not in rs["metadata"]
    assert rs["spec"]["pool"]["generation"] == 4


def test_mig_on_announces_only_the_instances_named_by_profile_id_and_placement(
    fake: InProcessSmi,
) -> None:
    fake.init("A100-SXM4-40GB", 1, node="node-m", mig=True)
    assert fake("-i", "0", "mig", "-cgi", "9,19,14,20", "-C")[1] == 0
    state = fs.load(fake.path)
    gpu = state["gpus"][0]
    devices = dra.devices(state)
    # gpu-<minor>-mig-<profile without dots, "+" made "-">-<GI profile ID>-<placement start>
    assert names(devices) == [
        "gpu-0-mig-1g5gb-19-0",
        "gpu-0-mig-1g5gb-me-20-1",
        "gpu-0-mig-2g10gb-14-2",
        "gpu-0-mig-3g20gb-9-4",
    ]
    ci_uuids = {gi["profile_id"]: gi["cis"][0]["uuid"] for gi in gpu["gis"]}
    three = by_name(devices)["gpu-0-mig-3g20gb-9-4"]
    assert three == {
        "name": "gpu-0-mig-3g20gb-9-4",
        "attributes": {
            "architecture": {"string": "Ampere"},
            "brand": {"string": "Nvidia"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "cudaDriverVersion": {"version": "12.4.0"},
            "driverVersion": {"version": "550.90.7"},
            "parentUUID": {"string": gpu["uuid"]},
            "productName": {"string": "NVIDIA A100-SXM4-40GB"},
            "profile": {"string": "3g.20gb"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:07:00.0"},
            "type": {"string": "mig"},
            "uuid": {"string": ci_uuids[9]},
        },
        "capacity": {
            "copyEngines": {"value": "3"},
            "decoders": {"value": "2"},
            "encoders": {"value": "0"},
            "jpegEngines": {"value": "0"},
            "memory": {"value": "19968Mi"},
            "memorySlice4": {"value": "1"},
            "memorySlice5": {"value": "1"},
            "memorySlice6": {"value": "1"},
            "memorySlice7": {"value": "1"},
            "multiprocessors": {"value": "42"},
            "ofaEngines": {"value": "0"},
        },
    }
    media = by_name(devices)["gpu-0-mig-1g5gb-me-20-1"]
    assert media["attributes"]["profile"] == {"string": "1g.5gb+me"}
    assert media["attributes"]["uuid"] == {"string": ci_uuids[20]}
    assert {k: v["value"] for k, v in media["capacity"].items() if k != "memory"} == {
        "copyEngines": "1",
        "decoders": "1",
        "encoders": "0",
        "jpegEngines": "1",
        "memorySlice1": "1",
        "multiprocessors": "14",
        "ofaEngines": "1",
    }
    assert by_name(devices)["gpu-0-mig-2g10gb-14-2"]["capacity"]["memory"] == {"value": "9851Mi"}


def test_mixed_gpus_whole_mig_and_stranded(fake: InProcessSmi) -> None:
    """GPU 0 MIG on with instances (Hopper's 1g.20gb gets CI profile 7, still its full CI),
    GPU 1 MIG off, GPU 2 MIG on with a GPU instance but no compute instance: nothing."""
    fake.init("H100 80GB HBM3", 3, node="node-x")
    for gpu in ("0", "2"):
        assert fake("-i", gpu, "-mig", "1")[1] == 0
    assert fake("-i", "0", "mig", "-cgi", "15,15,14", "-C")[1] == 0
    assert fake("-i", "2", "mig", "-cgi", "19")[1] == 0
    state = fs.load(fake.path)
    assert state["gpus"][2]["gis"] and not state["gpus"][2]["gis"][0]["cis"]
    devices = dra.devices(state)
    mig = sorted(n for n in names(devices) if n.startswith("gpu-0-"))
    assert len(mig) == 3 and {n.rsplit("-", 2)[0] for n in mig} == {
        "gpu-0-mig-1g20gb",
        "gpu-0-mig-2g20gb",
    }
    assert [n for n in names(devices) if not n.startswith("gpu-0-")] == ["gpu-1"]
    whole = by_name(devices)["gpu-1"]
    assert whole["attributes"]["architecture"] == {"string": "Hopper"}
    assert whole["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert whole["capacity"] == {"memory": {"value": "81559Mi"}}
    one = next(d for d in devices if d["name"].startswith("gpu-0-mig-1g20gb-15-"))
    assert one["attributes"]["profile"] == {"string": "1g.20gb"}
    start = int(one["name"].rsplit("-", 1)[1])
    assert {k for k in one["capacity"] if k.startswith("memorySlice")} == {
        f"memorySlice{start}",
        f"memorySlice{start + 1}",
    }


def test_a_pending_mig_mode_is_not_current(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-80GB", 1)
    fs.add_process(fake.path, 0, 11)  # holds the GPU: Ampere's mode change waits for a reset
    fake("-i", "0", "-mig", "1")
    state = fs.load(fake.path)
    assert state["gpus"][0]["mig_pending"] and not state["gpus"][0]["mig_current"]
    assert names(dra.devices(state)) == ["gpu-0"]


def test_a_partial_compute_instance_fails_discovery_as_the_plugin_does(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-40GB", 1, mig=True)
    assert fake("-i", "0", "mig", "-cgi", "9")[1] == 0
    gi = fs.load(fake.path)["gpus"][0]["gis"][0]["id"]
    assert fake("-i", "0", "mig", "-cci", "1c.3g.20gb", "-gi", str(gi))[1] == 0
    with pytest.raises(dra.PluginStartError, match="error getting profile info for MIG device"):
        dra.devices(fs.load(fake.path))


def test_host_facts_the_fake_does_not_hold(fake: InProcessSmi) -> None:
    fake.init("A100-SXM4-40GB", 2, driver_version="510.47.03")
    fake("-i", "1", "-mig", "1")
    fake("-i", "1", "-r")
    fake("-i", "1", "mig", "-cgi", "19", "-C")
    host = dra.Host(pcie_roots={1: "pci0000:0e"}, addressing_mode="None")
    gpu0, mig = dra.devices(fs.load(fake.path), host)
    assert gpu0["attributes"]["driverVersion"] == {"version": "510.47.3"}
    assert gpu0["attributes"]["cudaDriverVersion"] == {"version": "11.6.0"}
    assert "resource.kubernetes.io/pcieRoot" not in gpu0["attributes"]
    assert mig["attributes"]["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:0e"}
    assert gpu0["attributes"]["addressingMode"] == mig["attributes"]["addressingMode"]
    assert mig["attributes"]["addressingMode"] == {"string": "None"}


def test_formats() -> None:
    assert dra.semver("580.95.05") == "580.95.5"  # as a real slice shows it
    assert dra.semver("8.0") == "8.0.0"
    with pytest.raises(dra.PluginStartError):
        dra.semver("550.90.07-beta")
    assert dra.cuda_version("580.95.05", dra.Host()) == "13.0"
    assert dra.cuda_version("999.1", dra.Host(cuda_version="14.1")) == "14.1"
    with pytest.raises(ValueError, match="no CUDA version known"):
        dra.cuda_version("999.1", dra.Host())
    assert [dra.binary_si(v) for v in (7, 1023, 1024, 1536, 40537 * 2**20, 81920 * 2**20)] == [
        "7",
        "1023",
        "1Ki",
        "1536",
        "40537Mi",
        "80Gi",
    ]
    assert dra.pci_bus_id("00000000:BD:00.0") == "0000:bd:00.0"
    assert dra.pci_bus_id("0001:02:00.0") == "0001:02:00.0"
    assert dra.rfc1123("1g5gb+me") == "1g5gb-me"


@pytest.mark.parametrize("model", sorted(MIG_MODELS))
def test_profile_names_are_nvidia_smis(model: str, fake: InProcessSmi) -> None:
    """go-nvlib's computed name equals the name `mig -lgip` prints, for every profile of every
    catalog model (the H200's 3g.71gb needs Go's rounding of 70.5 up)."""
    fake.init(model, 1, mig=True)
    state = fs.load(fake.path)
    gpu = state["gpus"][0]
    for p in MIG_MODELS[model].profiles:
        assert dra.profile_name(state, gpu, p) == p.name


@pytest.mark.parametrize("model", sorted(MIG_MODELS))
def test_names_and_keys_fit_the_api(model: str, fake: InProcessSmi) -> None:
    """Device names are DNS labels; attribute and capacity names C identifiers of at most 32
    characters (a domain before a `/`), as resource.k8s.io/v1 validates them; at most 128
    devices per slice. Checked on a GPU full of the smallest instances."""
    fake.init(model, 8, mig=True)
    smallest = MIG_MODELS[model].profiles[0]
    ids = ",".join([str(smallest.id)] * smallest.max_count)
    assert fake("mig", "-cgi", ids, "-C")[1] == 0
    devices = dra.devices(fs.load(fake.path))
    assert len(devices) == 8 * smallest.max_count <= 128
    for d in devices:
        assert DNS_LABEL.match(d["name"]) and len(d["name"]) <= 63
        for key in [*d["attributes"], *d["capacity"]]:
            local = key.rsplit("/", 1)[-1]
            assert C_IDENTIFIER.match(local) and len(local) <= 32, key


def test_device_classes_as_the_chart_installs_them() -> None:
    assert dra.device_classes() == [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": "device.driver == 'gpu.nvidia.com' && "
                            "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                        }
                    }
                ],
                "extendedResourceName": "nvidia.com/gpu",
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "mig.nvidia.com"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": "device.driver == 'gpu.nvidia.com' && "
                            "device.attributes['gpu.nvidia.com'].type == 'mig'"
                        }
                    }
                ]
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "vfio.gpu.nvidia.com"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": "device.driver == 'gpu.nvidia.com' && "
                            "device.attributes['gpu.nvidia.com'].type == 'vfio'"
                        }
                    }
                ]
            },
        },
    ]
    older = dra.device_classes("resource.k8s.io/v1beta1")
    assert {c["apiVersion"] for c in older} == {"resource.k8s.io/v1beta1"}
    assert all("extendedResourceName" not in c["spec"] for c in older)
