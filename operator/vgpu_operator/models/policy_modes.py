"""The per-mode sections of a policy's spec: `hamiCore` (HAMi's per-node overrides), `ascendVnpu`
(HAMi's Ascend vNPU), `mig` (dynamic or static partitioning, with its layout), and the GPUs the
device plugin must not register (`filterDevices`)."""

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
