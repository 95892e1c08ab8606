"""The per-mode sections of a policy's spec: `hamiCore` (HAMi's per-node overrides), `ascendVnpu`
(HAMi's Ascend vNPU), `mig` (dynamic or static partitioning, with its layout), `dra` (what
NVIDIA's DRA driver hands out: whole GPUs, a static MIG layout, or dynamic MIG), and the GPUs
the device plugin must not register (`filterDevices`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from vgpu_operator.bounds import MAX_GPUS_PER_NODE
from vgpu_operator.models.admission import AdmissionRule, PolicyModel, cel_rules

MIG_PROFILE_PATTERN = r"^[1-8]g\.[0-9]+gb(\+me)?$"
MAX_MIG_PROFILES = 16
MAX_MIG_LAYOUTS = 64
MIG_COMPUTE_SLICES = 7


def _profile_slices(profile: str) -> int:
    """Compute slices of a GPU instance profile: the `<G>` of `<G>g.<GB>gb`."""
    return int(profile.split("g.", 1)[0])


class FilterDevices(PolicyModel):
    """GPUs the device plugin must not register on the node."""

    uuid: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    index: list[Annotated[int, Field(ge=0, le=MAX_GPUS_PER_NODE - 1)]] = Field(default_factory=list)


class HamiCoreSpec(PolicyModel):
    """Per-node overrides the HAMi plugin reads from `volcano-vgpu-node-config`."""

    device_split_count: Annotated[int, Field(ge=1, le=128)] | None = Field(
        default=None, alias="deviceSplitCount"
    )
    device_memory_scaling: Annotated[float, Field(gt=0, le=100)] | None = Field(
        default=None, alias="deviceMemoryScaling"
    )
    device_core_scaling: Annotated[float, Field(gt=0, le=100)] | None = Field(
        default=None, alias="deviceCoreScaling"
    )
    filter_devices: FilterDevices | None = Field(default=None, alias="filterDevices")


class AscendVnpuSpec(PolicyModel):
    """Per-node fields of `hami-device-node-config` (HAMi's Ascend vNPU)."""

    v_device_count: Annotated[int, Field(ge=1, le=128)] | None = Field(
        default=None, alias="vDeviceCount"
    )
    hami_vnpu_core: bool | None = Field(default=None, alias="hamiVnpuCore")
    filter_devices: FilterDevices | None = Field(default=None, alias="filterDevices")


class MigLayout(PolicyModel):
    """A fixed MIG layout for some GPUs of a node: `{gpus: all, profiles: {"1g.10gb": 7}}`."""

    gpus: Literal["all"] | list[Annotated[int, Field(ge=0, le=63)]] = Field(
        default="all",
        description='"all", or a list of GPU indexes (0-63) this layout applies to.',
    )
    profiles: dict[
        Annotated[str, Field(pattern=MIG_PROFILE_PATTERN)], Annotated[int, Field(ge=1, le=7)]
    ] = Field(max_length=MAX_MIG_PROFILES)

    RULES = (
        AdmissionRule(
            "size(self.profiles) > 0",
            "profiles must name at least one MIG profile",
            lambda layout: bool(layout.profiles),
            ".profiles",
        ),
        AdmissionRule(
            f"self.profiles.map(k, int(k.substring(0, 1)) * self.profiles[k]).sum() <= "
            f"{MIG_COMPUTE_SLICES}",
            f"the profiles of one GPU use at most {MIG_COMPUTE_SLICES} compute slices (the <G> "
            "of <G>g.<GB>gb times the count)",
            lambda layout: (
                sum(_profile_slices(p) * n for p, n in layout.profiles.items())
                <= MIG_COMPUTE_SLICES
            ),
            ".profiles",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))


class MigSpec(PolicyModel):
    """MIG partitioning. `dynamic`: the device plugin creates instances per allocation (the
    node needs MIG mode on). `static`: a fixed layout per GPU, for pools served by NVIDIA's
    device plugin with a MIG strategy."""

    partitioning: Literal["dynamic", "static"] = "dynamic"
    layout: list[MigLayout] = Field(default_factory=list, max_length=MAX_MIG_LAYOUTS)

    RULES = (
        AdmissionRule(
            "(has(self.partitioning) && self.partitioning == 'static') ? "
            "(has(self.layout) && size(self.layout) > 0) : "
            "(!has(self.layout) || size(self.layout) == 0)",
            "a static partitioning needs a layout; a dynamic one takes none (the device "
            "plugin creates the instances)",
            lambda mig: bool(mig.layout) == (mig.partitioning == "static"),
            ".layout",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))


DraDevices = Literal["whole-gpu", "static-mig", "dynamic-mig"]


class DraSpec(PolicyModel):
    """What NVIDIA's DRA driver publishes on a DRA pool's nodes. `whole-gpu`: MIG off, one
    device per GPU (DeviceClass gpu.nvidia.com). `static-mig`: the node agent applies `layout`
    (as mig mode's static layout) and the driver publishes the MIG devices it finds when its
    kubelet plugin starts (DeviceClass mig.nvidia.com; `GetPerGpuAllocatableDevices` and
    `discoverMigDevicesByGPU` in kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:
    cmd/gpu-kubelet-plugin/nvlib.go). `dynamic-mig`: MIG mode on, the driver creates and destroys
    the instances per claim under its alpha `DynamicMIG` feature gate, one setting per driver
    installation (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:pkg/featuregates/featuregates.go),
    which at start destroys every MIG device it did not create (`DestroyUnknownMIGDevices` in
    kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:cmd/gpu-kubelet-plugin/device_state.go)."""

    devices: DraDevices = Field(
        default="whole-gpu",
        description="whole-gpu (MIG off), static-mig (the agent applies layout; the driver "
        "publishes its MIG devices) or dynamic-mig (the driver's DynamicMIG feature gate "
        "partitions per claim; the operator config's dra.dynamicMIG must say it is on).",
    )
    layout: list[MigLayout] = Field(
        default_factory=list,
        max_length=MAX_MIG_LAYOUTS,
        description="The static MIG layout of static-mig, as spec.mig.layout of mode mig.",
    )

    RULES = (
        AdmissionRule(
            "(has(self.devices) && self.devices == 'static-mig') ? "
            "(has(self.layout) && size(self.layout) > 0) : "
            "(!has(self.layout) || size(self.layout) == 0)",
            "devices static-mig needs a layout (the MIG instances the agent creates and the "
            "driver publishes); whole-gpu and dynamic-mig take none",
            lambda dra: bool(dra.layout) == (dra.devices == "static-mig"),
            ".layout",
        ),
    )
    model_config = ConfigDict(json_schema_extra=cel_rules(RULES))

    def mig(self) -> MigSpec | None:
        """The MIG settings the node's GPUs carry (None: MIG off), as the agent applies them."""
        if self.devices == "static-mig":
            return MigSpec(partitioning="static", layout=list(self.layout))
        if self.devices == "dynamic-mig":
            return MigSpec(partitioning="dynamic")
        return None
