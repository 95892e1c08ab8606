"""A double of the GPU kubelet plugin of NVIDIA's DRA driver: what it announces for one node.

The real plugin (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/) reads the
GPUs through NVML and publishes them as ResourceSlices of driver `gpu.nvidia.com`. For a simulated
node this computes the same objects from the fake nvidia-smi's state (`fakesmi_state.NodeState`):
whole GPUs and statically created MIG devices, with the feature gates at their defaults
(DynamicMIG and PassthroughSupport off,
kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:pkg/featuregates/featuregates.go: no counters, no VFIO
devices). It prepares nothing: a claim allocated on these devices is never prepared, which a kwok
node does not need.

Also the DeviceClasses the driver's Helm chart installs. `dra_publish` writes both to an API.

What the fake's state does not hold is either taken from the models' catalog (NVML name, memory,
architecture) or given by `Host` (PCIe root, addressing mode); each value cites its source.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from vgpu_devcluster.fakesmi_render import gib, model_of
from vgpu_devcluster.fakesmi_state import GpuState, NodeState
from vgpu_operator.models.gpu_catalog import GpuModel, MigProfile

UPSTREAM: Final = "kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1"
# kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/main.go `DriverName`
DRIVER: Final = "gpu.nvidia.com"
# The chart's `dra-driver-nvidia-gpu.resourceApiVersion` picks resource.k8s.io/v1 where served
# (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/templates/
# _helpers.tpl); the plugin itself builds k8s.io/api/resource/v1 objects.
API_VERSION: Final = "resource.k8s.io/v1"

# Device types, the `type` attribute (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
# cmd/gpu-kubelet-plugin/types.go `GpuDeviceType`, `MigStaticDeviceType`, `VfioDeviceType`).
GPU_TYPE: Final = "gpu"
MIG_TYPE: Final = "mig"
VFIO_TYPE: Final = "vfio"

# The standard attributes of k8s.io/dynamic-resource-allocation/deviceattribute, as vendored at
# kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:vendor/k8s.io/dynamic-resource-allocation/
# deviceattribute/attribute.go `StandardDeviceAttributePCIBusID`, `...PCIeRoot`.
PCI_BUS_ID_ATTR: Final = "resource.kubernetes.io/pciBusID"
PCIE_ROOT_ATTR: Final = "resource.kubernetes.io/pcieRoot"

# go-nvlib's `GetArchitectureAsString` (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
# vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/device.go), by the catalog's architectures.
ARCHITECTURE: Final = {"ampere": "Ampere", "hopper": "Hopper", "ada": "Ada Lovelace"}
# CUDA compute capability (NVML's `GetCudaComputeCapability`, printed "%d.%d" by go-nvlib's
# `GetCudaComputeCapabilityAsString`) of the catalog's parts: GA100 (A100, A30) 8.0, GH100/GH200
# 9.0, AD102 (RTX 4090) 8.9, as NVIDIA's CUDA GPU table lists them.
COMPUTE_CAPABILITY: Final = {"ampere": "8.0", "hopper": "9.0", "ada": "8.9"}
# go-nvlib's `GetBrandAsString`: NVML_BRAND_NVIDIA is "Nvidia"; a real slice of an NVIDIA A100
# 80GB PCIe shows `brand: Nvidia` (kubernetes-sigs/dra-driver-nvidia-gpu#719). The data-center
# parts of the catalog share that brand; the RTX 4090's "GeForce" is UNCONFIRMED (no listing).
BRAND_DATACENTER: Final = "Nvidia"
BRAND_GEFORCE: Final = "GeForce"
# The CUDA version a driver branch reports (`SystemGetCudaDriverVersion`, nvidia-smi's "CUDA
# Version"): the toolkit each branch shipped with (CUDA Toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions"); a real slice shows 13.0.0 for driver 580.95.05
# (kubernetes-sigs/dra-driver-nvidia-gpu#719).
CUDA_BY_BRANCH: Final = {
    470: "11.4",
    510: "11.6",
    515: "11.7",
    520: "11.8",
    525: "12.0",
    530: "12.1",
    535: "12.2",
    545: "12.3",
    550: "12.4",
    555: "12.5",
    560: "12.6",
    565: "12.7",
    570: "12.8",
    575: "12.9",
    580: "13.0",
}


class PluginStartError(RuntimeError):
    """The real plugin fails its device discovery here and publishes nothing."""


@dataclass(frozen=True)
class Host:
    """What the plugin reads from the host that the fake's state does not model.

    `pcie_roots`: GPU index -> `resource.kubernetes.io/pcieRoot` (`pci<domain>:<bus>`, from the
    sysfs link of the PCI device). A kwok node has no sysfs; the plugin then logs a warning and
    announces no pcieRoot (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    cmd/gpu-kubelet-plugin/nvlib.go `getGpuInfo`), which is the default here.
    `addressing_mode`: "HMM", "ATS" or "None" on coherent platforms; unset, the attribute is left
    out as it is where NVML reports the mode as not supported (go-nvlib
    `GetAddressingModeAsString` returns "" and `getGpuInfo` then sets none).
    `cuda_version`: the driver's CUDA version when CUDA_BY_BRANCH does not know its branch.
    """

    pcie_roots: Mapping[int, str] = field(default_factory=dict)
    addressing_mode: str | None = None
    cuda_version: str | None = None


# --- formats ---------------------------------------------------------------------------------


def semver(version: str) -> str:
    """Masterminds/semver's `MustParse(v).String()` for NVML's dotted versions: missing parts are
    0 and leading zeros go ("580.95.05" -> "580.95.5", "8.0" -> "8.0.0"; the real slice of
    kubernetes-sigs/dra-driver-nvidia-gpu#719 shows driverVersion 580.95.5)."""
    parts = version.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise PluginStartError(f"version {version!r} does not parse as semver")
    return ".".join(str(int(p)) for p in [*parts, "0", "0"][:3])


def cuda_version(driver_version: str, host: Host) -> str:
    if host.cuda_version:
        return host.cuda_version
    branch = driver_version.split(".", 1)[0]
    known = CUDA_BY_BRANCH.get(int(branch)) if branch.isdigit() else None
    if known is None:
        raise ValueError(
            f"no CUDA version known for driver {driver_version}: set Host.cuda_version"
        )
    return known


def binary_si(value: int) -> str:
    """A `resource.NewQuantity(value, resource.BinarySI)` as the API writes it: below 1024 plain,
    else the largest power of 1024 that divides it (k8s.io/apimachinery resource.Quantity
    `CanonicalizeBytes`)."""
    if -1024 < value < 1024:
        return str(value)
    for power, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        if value % 1024**power == 0:
            return f"{value // 1024**power}{suffix}"
    return str(value)


def pci_bus_id(raw: str) -> str:
    """go-nvlib's `GetPCIBusID`: lower case, an 8-digit domain `0000xxxx:` cut to 4 digits
    (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/device.go `pciBusIDPrefixRE`)."""
    bus = raw.lower()
    return bus[4:] if re.match(r"^0{4}[0-9a-f]{4}:", bus) else bus


def rfc1123(name: str) -> str:
    """`toRFC1123Compliant` (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    cmd/gpu-kubelet-plugin/mig.go)."""
    name = re.sub(r"[^a-z0-9-.]", "-", name.lower()).strip("-").removesuffix(".")
    return name[:253]


def _go_round(x: float) -> int:
    """Go's math.Round: halves away from zero (Python's round() takes halves to even)."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def instance_mib(state: NodeState, gpu: GpuState, p: MigProfile) -> int:
    """NVML's `GpuInstanceProfileInfo.MemorySizeMB` (MiB) as the fake's `mig -lgip` shows it:
    two-decimal GiB, so within 5 MiB of a real GPU's figure (the catalog holds no exact one)."""
    return round(gib(state, gpu, p) * 1024)


def profile_name(state: NodeState, gpu: GpuState, p: MigProfile) -> str:
    """go-nvlib's `MigProfileInfo.String()` for a GPU instance with its full compute instance:
    `<G>g.<GB>gb` and the profile's attribute suffix (`+me`), GB from `getMigMemorySizeGB`: the
    instance's share of the GPU's memory rounded up to eighths, times the GPU's memory in whole
    GB rounded up (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/mig_profile.go)."""
    total = model_of(gpu).memory_mib * 2**20
    share = math.ceil(instance_mib(state, gpu, p) * 2**20 / total * 8) / 8
    gigabytes = _go_round(share * -(-total // 2**30))
    suffix = p.name[p.name.index("gb") + 2 :]
    return f"{p.slices}g.{gigabytes}gb{suffix}"


# --- devices ---------------------------------------------------------------------------------


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _version(value: str) -> dict[str, str]:
    return {"version": semver(value)}


def brand(model: GpuModel) -> str:
    return BRAND_GEFORCE if "GeForce" in model.nvml_name else BRAND_DATACENTER


def _common(state: NodeState, gpu: GpuState, host: Host) -> dict[str, dict[str, str]]:
    """The attributes a whole GPU and its MIG devices share, `type` and `uuid` aside:
    `GpuInfo.Attributes` (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    cmd/gpu-kubelet-plugin/deviceinfo.go) and `CommonAttributesMig`
    (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/mig.go)."""
    model = model_of(gpu)
    attrs = {
        "productName": _string(model.nvml_name),
        "brand": _string(brand(model)),
        "architecture": _string(ARCHITECTURE[model.arch]),
        "cudaComputeCapability": _version(COMPUTE_CAPABILITY[model.arch]),
        "driverVersion": _version(state["driver_version"]),
        "cudaDriverVersion": _version(cuda_version(state["driver_version"], host)),
        PCI_BUS_ID_ATTR: _string(pci_bus_id(gpu["bus_id"])),
    }
    if gpu["index"] in host.pcie_roots:
        attrs[PCIE_ROOT_ATTR] = _string(host.pcie_roots[gpu["index"]])
    if host.addressing_mode:
        attrs["addressingMode"] = _string(host.addressing_mode)
    return attrs


def minor(gpu: GpuState) -> int:
    """The GPU's minor number (`/dev/nvidia<minor>`): the fake models none, so its index."""
    return gpu["index"]


def gpu_device(state: NodeState, gpu: GpuState, host: Host = Host()) -> dict[str, Any]:
    """`GpuInfo.GetDevice` (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    cmd/gpu-kubelet-plugin/deviceinfo.go): `gpu-<minor>`, capacity `memory` = NVML's total
    bytes (`fullGpuCapacity`, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    cmd/gpu-kubelet-plugin/partitions.go)."""
    attrs = {"type": _string(GPU_TYPE), "uuid": _string(gpu["uuid"]), **_common(state, gpu, host)}
    memory = model_of(gpu).memory_mib * 2**20
    return {
        "name": f"gpu-{minor(gpu)}",
        "attributes": dict(sorted(attrs.items())),
        "capacity": {"memory": {"value": binary_si(memory)}},
    }


def mig_devices(state: NodeState, gpu: GpuState, host: Host = Host()) -> list[dict[str, Any]]:
    """The MIG devices present on a GPU with MIG on: one per compute instance (NVML's MIG device
    handles, `walkMigDevices`), `MigDeviceInfo.GetDevice`
    (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/deviceinfo.go).

    A GPU instance without a compute instance is no MIG device and not announced. A compute
    instance that does not span its GPU instance (`1c.3g.20gb`) matches no profile the plugin
    knows (it keeps only profiles with C == G, `getGpuInfo`), and `getMigDevices` fails the
    whole discovery: PluginStartError
    (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/nvlib.go)."""
    out = []
    model = model_of(gpu)
    for gi in gpu["gis"]:
        p = model.profile(gi["profile_id"])
        for ci in gi["cis"]:
            if p is None or ci["size"] != p.slices:
                raise PluginStartError(f"error getting profile info for MIG device: {ci['uuid']}")
            name = profile_name(state, gpu, p)
            attrs = {
                "type": _string(MIG_TYPE),
                "uuid": _string(ci["uuid"]),
                "parentUUID": _string(gpu["uuid"]),
                "profile": _string(name),
                **_common(state, gpu, host),
            }
            # `CommonCapacitiesMig` (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
            # cmd/gpu-kubelet-plugin/mig.go): the GPU instance profile's engines and memory in
            # bytes; then one `memorySlice<i>` of 1 per memory slice the instance covers
            # (`MigDeviceInfo.GetDevice`, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
            # cmd/gpu-kubelet-plugin/deviceinfo.go).
            capacity = {
                "multiprocessors": p.sm,
                "copyEngines": p.ce,
                "decoders": p.dec,
                "encoders": p.enc,
                "jpegEngines": p.jpeg,
                "ofaEngines": p.ofa,
                "memory": instance_mib(state, gpu, p) * 2**20,
            }
            capacity |= {f"memorySlice{i}": 1 for i in range(gi["start"], gi["start"] + gi["size"])}
            # `MigSpecTuple.ToCanonicalName` (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
            # cmd/gpu-kubelet-plugin/mig.go):
            # gpu-<parent minor>-mig-<profile, dots removed, RFC 1123>-<GI profile ID>-<start>.
            pname = rfc1123(name.replace(".", ""))
            out.append(
                {
                    "name": f"gpu-{minor(gpu)}-mig-{pname}-{p.id}-{gi['start']}",
                    "attributes": dict(sorted(attrs.items())),
                    "capacity": {k: {"value": binary_si(v)} for k, v in sorted(capacity.items())},
                }
            )
    return out


def devices(state: NodeState, host: Host = Host()) -> list[dict[str, Any]]:
    """Every device the plugin announces for the node (`GetPerGpuAllocatableDevices`,
    kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/nvlib.go): a GPU with MIG
    off as itself, a GPU with MIG on only through its MIG devices (none when it has no
    instance: stranded, the plugin only warns).
    MIG mode is the current one (NVML `IsMigEnabled`), not a pending change.

    Order: the static path appends devices in Go map order (`publishResources`,
    kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/driver.go), which differs
    from run to run; here the order of its DynamicMIG path (by PCI bus ID, then by name) so the
    output is reproducible."""
    out: list[dict[str, Any]] = []
    for gpu in sorted(state["gpus"], key=lambda g: pci_bus_id(g["bus_id"])):
        if gpu["mig_current"]:
            out.extend(sorted(mig_devices(state, gpu, host), key=lambda d: str(d["name"])))
        else:
            out.append(gpu_device(state, gpu, host))
    return out


# --- the objects -----------------------------------------------------------------------------

# The ResourceSlice controller the plugin publishes through names slices
# `<index, hex, at least 5 digits>-<driver>-<node>-` + the apiserver's random suffix, and writes
# the pool's generation (1 for a first slice) and slice count
# (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:vendor/k8s.io/dynamic-resource-allocation/
# resourceslice/resourceslicecontroller.go `syncPool`, `encodeIndex`,
# `resourceSliceIndexMinLength`).
INDEX_DIGITS: Final = 5


def slice_prefix(node: str, index: int = 0) -> str:
    return f"{index:0{INDEX_DIGITS}x}-{DRIVER}-{node}-"


def resource_slices(
    node: str,
    state: NodeState,
    host: Host = Host(),
    *,
    node_uid: str = "",
    generation: int = 1,
) -> list[dict[str, Any]]:
    """The node's ResourceSlices: one pool named after the node holding one slice with every
    device (`publishResources`, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    cmd/gpu-kubelet-plugin/driver.go: one `resourceslice.Slice` in `Pools[nodeName]`), owned by
    the Node
    (`kubeletplugin.Helper.PublishResources`, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    vendor/k8s.io/dynamic-resource-allocation/kubeletplugin/draplugin.go), no shared counters. With
    `node_uid` empty the owner reference (whose uid the API requires) is left out."""
    meta: dict[str, Any] = {"generateName": slice_prefix(node)}
    if node_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
        ]
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": meta,
            "spec": {
                "driver": DRIVER,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                "nodeName": node,
                "devices": devices(state, host),
            },
        }
    ]


# The chart's DeviceClasses (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/
# dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml, deviceclass-mig.yaml,
# deviceclass-vfio-gpu.yaml), installed with `resources.gpus.enabled`. On resource.k8s.io/v1 the
# gpu class also names the extended resource `nvidia.com/gpu` (DRAExtendedResource, alpha and off
# by default in Kubernetes 1.35: an apiserver without the gate drops the field).
DEVICE_CLASS_TYPES: Final = {
    "gpu.nvidia.com": GPU_TYPE,
    "mig.nvidia.com": MIG_TYPE,
    "vfio.gpu.nvidia.com": VFIO_TYPE,
}
EXTENDED_RESOURCE: Final = {"gpu.nvidia.com": "nvidia.com/gpu"}


def selector(device_type: str) -> str:
    return f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"


def device_classes(api_version: str = API_VERSION) -> list[dict[str, Any]]:
    out = []
    for name, device_type in DEVICE_CLASS_TYPES.items():
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector(device_type)}}]}
        if api_version == API_VERSION and name in EXTENDED_RESOURCE:
            spec["extendedResourceName"] = EXTENDED_RESOURCE[name]
        out.append(
            {
                "apiVersion": api_version,
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    return out
