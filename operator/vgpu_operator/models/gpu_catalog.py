"""MIG profiles per GPU model: the one table the planner, the fake nvidia-smi and the Volcano
config (`knownMigGeometries`) share.

Sources: the MIG user guide
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html
and supported-mig-profiles.html beside it: `mig -lgip` layouts, `mig -lgipp` placements, profiles
per model), the listings in NVIDIA/mig-parted#97 (A100 80GB) and Summer-Lo/Docker_configuration
`000-MIG/README.md` (A30; A100-SXM4-40GB memory total), and NVIDIA's GFD labels (SM counts,
NVIDIA/cloud-native-docs@52dcb7b8d956:gpu-operator/manifests/output/mig-mixed-node-labels.json).
Everything else in an entry is named in its `unconfirmed` text: values taken from `mig -lgip`
tables of the MIG user guide as copied in public notes (engine counts, some GiB figures), real
listings cited at their entry, or estimates. The agent places instances from the driver's own
`-lgip`/`-lgipp` only (names and IDs differ per GPU model, NVIDIA/mig-parted#157); where the driver
lists none yet (drivers up to 535 list none while MIG is off:
NVIDIA/mig-parted@v0.15.0:pkg/mig/discovery/discovery.go) this table only rejects impossible layouts
before MIG is turned on (core.mig.partition, two phases). It is also the model of the fake
nvidia-smi and of
the built-in `knownMigGeometries`.

Geometry model: a GPU has `compute_slices` (7 or 4) and `memory_slices` (8 or 4). A GPU instance of
a profile starts at one of `placements` and covers `size` memory slices `[start, start+size)`
(`{<start indices>}:<memory-slice count>` in the user guide's `-lgipp`); the compute slices of all
instances add up to at most `compute_slices`. The planner and the fake both use exactly this model.
"""

from __future__ import annotations

import re
from typing import Final, Literal, NamedTuple

Arch = Literal["ampere", "hopper", "ada"]

# NVML compute-instance profile enum by compute slices (NVIDIA/go-nvml@2f9e261fe40a:
# gen/nvml/nvml.h: CI 1_SLICE=0, 2=1, 3=2, 4=3, 7=4, 8=5, 6=6); the "full" CI of a GI uses all of
# the GI's compute slices.
CI_PROFILE_BY_SLICES: Final[dict[int, int]] = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class MigProfile(NamedTuple):
    """One GPU-instance profile of one GPU model, as `nvidia-smi mig -lgip`/`-lgipp` show it."""

    id: int  # the nvidia-smi profile ID (`-lgip`'s ID column), not the NVML enum index
    name: str  # "1g.10gb", "1g.10gb+me"
    slices: int  # compute slices (the N of "Ng")
    size: int  # memory slices one instance covers (the ":N" of `-lgipp`)
    memory_gib: float  # the "Memory GiB" column of `-lgip`
    max_count: int  # the "Total" of "Free/Total"
    placements: tuple[int, ...]  # legal start memory slices
    sm: int
    dec: int
    enc: int
    ce: int
    jpeg: int
    ofa: int
    since_driver: int = 0  # first driver branch that offers the profile (0: always)
    unconfirmed: str = ""  # what in this entry no cited source confirms
    ci_profile: int = -1  # the CI profile `-C` creates when it is not the one by slices
    # Lower `-lgip` figures other cited listings show (another driver); `memory_gib` is what the
    # fake prints. What an instance surely has: core.volcano.mig_memory.instance_memory_mib.
    listed_gib: tuple[float, ...] = ()

    @property
    def memory_mib(self) -> int:
        """MiB as Volcano/HAMi `knownMigGeometries` write it (e.g. 9.50 GiB -> 9728)."""
        return round(self.memory_gib * 1024)

    @property
    def ci_profile_id(self) -> int:
        """The compute-instance profile ID of the default CI that `-C` creates: the one by
        compute slices, except where the driver uses another (Hopper's double-memory 1g
        profiles get CI profile 7, NVML's 1_SLICE_REV1; see HOPPER_1G_CI)."""
        return self.ci_profile if self.ci_profile >= 0 else CI_PROFILE_BY_SLICES[self.slices]

    @property
    def media(self) -> bool:
        return "+me" in self.name


class GpuModel(NamedTuple):
    """A GPU model: NVML name, memory, architecture and (for MIG-capable ones) profiles."""

    key: str  # short model name, a substring of the NVML name (knownMigGeometries `models`)
    nvml_name: str  # `--query-gpu=name`
    arch: Arch
    memory_mib: int  # `--query-gpu=memory.total` (nounits)
    compute_slices: int = 0
    memory_slices: int = 0
    profiles: tuple[MigProfile, ...] = ()
    pci_device_id: str = ""  # mig-parted device-filter form, 0xDDDDVVVV (pkg/types/device.go)
    unconfirmed: str = ""

    @property
    def mig_capable(self) -> bool:
        return bool(self.profiles)

    @property
    def mode_change_needs_reset(self) -> bool:
        """Ampere needs a GPU reset for a MIG mode change; Hopper and later do not
        (`supportsMIGModeToggle`,
        NVIDIA/k8s-dra-driver-gpu@22407113785e:cmd/gpu-kubelet-plugin/nvlib.go)."""
        return self.arch == "ampere"

    def profile(self, key: str | int) -> MigProfile | None:
        """Look up a profile by nvidia-smi ID, short name (`3g.20gb`) or full name (`MIG ...`)."""
        for p in self.profiles:
            if isinstance(key, int):
                if p.id == key:
                    return p
            elif key.removeprefix("MIG ") == p.name:
                return p
        return None


# --- compact constructors -------------------------------------------------------------------

_P7_1: Final = (0, 1, 2, 3, 4, 5, 6)  # 1g on 7-slice GPUs (MIG user guide, `-lgipp`)
_P7_1X2: Final = (0, 2, 4, 6)  # double-memory 1g
_P7_2: Final = (0, 2, 4)
_P7_3: Final = (0, 4)
_P7_4: Final = (0,)
_P7_7: Final = (0,)


def _p(
    pid: int,
    name: str,
    size: int,
    gib: float,
    count: int,
    placements: tuple[int, ...],
    engines: tuple[int, int, int, int, int, int],
    *,
    since: int = 0,
    unconfirmed: str = "",
    ci: int = -1,
    low: tuple[float, ...] = (),
) -> MigProfile:
    """engines = (SM, DEC, ENC, CE, JPEG, OFA), the two `-lgip` lines in print order."""
    sm, dec, enc, ce, jpeg, ofa = engines
    slices = int(name.split("g.", 1)[0])
    return MigProfile(
        id=pid,
        name=name,
        slices=slices,
        size=size,
        memory_gib=gib,
        max_count=count,
        placements=placements,
        sm=sm,
        dec=dec,
        enc=enc,
        ce=ce,
        jpeg=jpeg,
        ofa=ofa,
        since_driver=since,
        unconfirmed=unconfirmed,
        ci_profile=ci,
        listed_gib=low,
    )


def _sku(
    base: GpuModel,
    key: str,
    nvml_name: str,
    pci_device_id: str,
    *,
    memory_mib: int | None = None,
    unconfirmed: str = "",
) -> GpuModel:
    """Another SKU of the same MIG geometry: the profiles of `base` under another NVML name
    (mig-parted's own config groups these device IDs with `base`:
    NVIDIA/mig-parted@v0.15.0:deployments/systemd/config-default.yaml)."""
    return base._replace(
        key=key,
        nvml_name=nvml_name,
        pci_device_id=pci_device_id,
        memory_mib=base.memory_mib if memory_mib is None else memory_mib,
        unconfirmed=unconfirmed,
    )


_GUIDE = "engine counts from the MIG user guide's -lgip table (public copies) only"
# GA100's engine columns in a real `mig -lgip` of an A100-PCIE-40GB on driver 510.47.03
# (yokatayama/e-learning@5b608b4:vmware/tkgs/nvidia-ai-enterprise/mig-enabled/README.md):
# 2g DEC 1, 3g DEC 2, 4g DEC 2. The A100 80GB has the same die, so the same engines.
_GA100_LISTING = "yokatayama/e-learning@5b608b4:vmware/tkgs/nvidia-ai-enterprise/mig-enabled"
# Hopper's double-memory 1g profile (ID 15) gets compute-instance profile 7 from `-C`, not 0:
# "Successfully created compute instance ID  0 on GPU  3 GPU instance ID  5 using profile MIG
# 1g.20gb (ID  7)" on an H100 80GB HBM3 (a public shell script's comment; the same is reported
# for GH200's 1g.24gb). On the other Hopper models by analogy.
HOPPER_1G_CI: Final = 7
_HOPPER_1G_CI_ANALOGY = "CI profile 7 of the 1g double-memory profile: by analogy with H100"

A100_40GB: Final = GpuModel(
    key="A100-SXM4-40GB",
    nvml_name="NVIDIA A100-SXM4-40GB",
    arch="ampere",
    memory_mib=40537,  # Summer-Lo/Docker_configuration 000-MIG/README.md
    compute_slices=7,
    memory_slices=8,
    pci_device_id="0x20B010DE",
    profiles=(
        _p(19, "1g.5gb", 1, 4.75, 7, _P7_1, (14, 0, 0, 1, 0, 0)),
        _p(20, "1g.5gb+me", 1, 4.75, 1, _P7_1, (14, 1, 0, 1, 1, 1), since=470),
        _p(15, "1g.10gb", 2, 9.62, 4, _P7_1X2, (14, 1, 0, 1, 0, 0), since=525, unconfirmed=_GUIDE),
        _p(14, "2g.10gb", 2, 9.62, 3, _P7_2, (28, 1, 0, 2, 0, 0), unconfirmed="GiB (R525+)"),
        _p(9, "3g.20gb", 4, 19.50, 2, _P7_3, (42, 2, 0, 3, 0, 0), unconfirmed="GiB (R525+)"),
        _p(5, "4g.20gb", 4, 19.50, 1, _P7_4, (56, 2, 0, 4, 0, 0), unconfirmed="GiB (R525+)"),
        _p(0, "7g.40gb", 8, 39.25, 1, _P7_7, (98, 5, 0, 7, 1, 1), unconfirmed="GiB (R525+)"),
    ),
)

A100_80GB: Final = GpuModel(
    key="A100-SXM4-80GB",
    nvml_name="NVIDIA A100-SXM4-80GB",
    arch="ampere",
    memory_mib=81920,
    compute_slices=7,
    memory_slices=8,
    pci_device_id="0x20B210DE",
    unconfirmed="memory.total (81920 MiB) is not from a captured listing",
    profiles=(
        _p(19, "1g.10gb", 1, 9.50, 7, _P7_1, (14, 0, 0, 1, 0, 0)),
        _p(20, "1g.10gb+me", 1, 9.50, 1, _P7_1, (14, 1, 0, 1, 1, 1), since=470),
        # not in a driver-515 listing of an A100 80GB PCIe; like A100-40GB's 1g.10gb, R525+
        _p(15, "1g.20gb", 2, 19.50, 4, _P7_1X2, (14, 1, 0, 1, 0, 0), since=525, unconfirmed=_GUIDE),
        _p(14, "2g.20gb", 2, 19.50, 3, _P7_2, (28, 1, 0, 2, 0, 0), unconfirmed=_GA100_LISTING),
        _p(9, "3g.40gb", 4, 39.25, 2, _P7_3, (42, 2, 0, 3, 0, 0), unconfirmed=_GA100_LISTING),
        _p(5, "4g.40gb", 4, 39.25, 1, _P7_4, (56, 2, 0, 4, 0, 0), unconfirmed=_GA100_LISTING),
        _p(0, "7g.80gb", 8, 79.00, 1, _P7_7, (98, 5, 0, 7, 1, 1), unconfirmed=_GUIDE),
    ),
)

H100_80GB: Final = GpuModel(
    key="H100 80GB HBM3",
    nvml_name="NVIDIA H100 80GB HBM3",
    arch="hopper",
    memory_mib=81559,  # GFD label nvidia.com/gpu.memory, cloud-native-docs (above)
    compute_slices=7,
    memory_slices=8,
    pci_device_id="0x233010DE",
    # `low`: an H100 80GB HBM3 on driver 525.125.06 lists 9.62 / 19.50 / 19.50 / 39.25 GiB for
    # 1g.10gb(+me) / 1g.20gb / 2g.20gb / 3g.40gb (its MIG device of 3g.40gb: 40192 MiB), in
    # https://cloud.google.com/compute/docs/gpus/create-gpu-vm-accelerator-optimized ("Create
    # Multi-instance GPUs"); 4g.40gb covers the same four memory slices as 3g.40gb.
    profiles=(
        _p(19, "1g.10gb", 1, 9.75, 7, _P7_1, (16, 1, 0, 1, 1, 0), low=(9.62,)),
        _p(20, "1g.10gb+me", 1, 9.75, 1, _P7_1, (16, 1, 0, 1, 1, 1), low=(9.62,)),
        _p(
            15,
            "1g.20gb",
            2,
            19.62,
            4,
            _P7_1X2,
            (26, 1, 0, 1, 1, 0),
            ci=HOPPER_1G_CI,
            low=(19.50,),
        ),
        _p(14, "2g.20gb", 2, 19.62, 3, _P7_2, (32, 2, 0, 2, 2, 0), low=(19.50,)),
        _p(9, "3g.40gb", 4, 39.50, 2, _P7_3, (60, 3, 0, 3, 3, 0), low=(39.25,)),
        _p(5, "4g.40gb", 4, 39.50, 1, _P7_4, (64, 4, 0, 4, 4, 0), low=(39.25,)),
        _p(0, "7g.80gb", 8, 79.25, 1, _P7_7, (132, 7, 0, 8, 7, 1)),
    ),
)

# A real `mig -lgip` of an H200 (https://github.com/NVIDIA/mig-parted/issues/120): IDs 15/9/5
# and GiB 16.00 / 32.25 / 69.50 / 139.75.
H200: Final = GpuModel(
    key="H200",
    nvml_name="NVIDIA H200",
    arch="hopper",
    memory_mib=143771,
    compute_slices=7,
    memory_slices=8,
    pci_device_id="0x233510DE",
    unconfirmed="memory.total (143771 MiB) is not from a captured listing",
    profiles=(
        _p(19, "1g.18gb", 1, 16.00, 7, _P7_1, (16, 1, 0, 1, 1, 0)),
        _p(20, "1g.18gb+me", 1, 16.00, 1, _P7_1, (16, 1, 0, 1, 1, 1)),
        _p(
            15,
            "1g.35gb",
            2,
            32.25,
            4,
            _P7_1X2,
            (26, 1, 0, 1, 1, 0),
            ci=HOPPER_1G_CI,
            unconfirmed=_HOPPER_1G_CI_ANALOGY,
        ),
        _p(14, "2g.35gb", 2, 32.25, 3, _P7_2, (32, 2, 0, 2, 2, 0)),
        _p(9, "3g.71gb", 4, 69.50, 2, _P7_3, (60, 3, 0, 3, 3, 0)),
        _p(5, "4g.71gb", 4, 69.50, 1, _P7_4, (64, 4, 0, 4, 4, 0)),
        _p(0, "7g.141gb", 8, 139.75, 1, _P7_7, (132, 7, 0, 8, 7, 1)),
    ),
)

# The PCIe SKUs of the 40GB/80GB geometries. mig-parted applies the same configs to
# these device IDs (NVIDIA/mig-parted@v0.15.0:deployments/systemd/config-default.yaml); the NVML
# names are the ones nvidia-smi prints.
A100_PCIE_40GB: Final = _sku(
    A100_40GB,
    "A100-PCIE-40GB",
    "NVIDIA A100-PCIE-40GB",
    "0x20F110DE",
    memory_mib=40960,  # and the name: `nvidia-smi -L` / the table in _GA100_LISTING
)
A100_80GB_PCIE: Final = _sku(
    A100_80GB,
    "A100 80GB PCIe",
    "NVIDIA A100 80GB PCIe",
    "0x20B510DE",
    unconfirmed="memory.total 81920 MiB as public --query-gpu captures show it",
)
H100_PCIE: Final = _sku(
    H100_80GB,
    "H100 PCIe",
    "NVIDIA H100 PCIe",
    "0x233110DE",
    unconfirmed="UNCONFIRMED: SM counts are the SXM part's (the PCIe part has 114 SMs, not 132)",
)
# GPUs no cited listing confirms (H100 NVL, GH200 144G, H800, A800, H20, H200 NVL, B200, GB200,
# RTX PRO 6000 Blackwell) are rows of models.gpu_catalog_unconfirmed, kept out of this table:
# nothing plans, checks or renders from them.

A30: Final = GpuModel(
    key="A30",
    nvml_name="NVIDIA A30",
    arch="ampere",
    memory_mib=24576,
    compute_slices=4,
    memory_slices=4,
    pci_device_id="0x20B710DE",
    unconfirmed="memory.total, GiB and engine columns: public -lgip copies only",
    profiles=(
        _p(14, "1g.6gb", 1, 5.81, 4, (0, 1, 2, 3), (14, 1, 0, 1, 0, 0)),
        _p(21, "1g.6gb+me", 1, 5.81, 1, (0, 1, 2, 3), (14, 1, 0, 1, 1, 1), since=470),
        _p(5, "2g.12gb", 2, 11.69, 2, (0, 2), (28, 2, 0, 2, 0, 0)),
        _p(
            6,
            "2g.12gb+me",
            2,
            11.69,
            1,
            (0, 2),
            (28, 2, 0, 2, 1, 1),
            since=525,
            unconfirmed="UNCONFIRMED: ID 6 and placements (no listing shows the ID)",
        ),
        _p(0, "4g.24gb", 4, 23.44, 1, (0,), (56, 4, 0, 4, 1, 1)),
    ),
)

RTX_4090: Final = GpuModel(
    key="RTX 4090",
    nvml_name="NVIDIA GeForce RTX 4090",
    arch="ada",
    memory_mib=24564,
    unconfirmed="not MIG-capable; listed so the agent and the fake know it",
)

GPU_MODELS: Final[dict[str, GpuModel]] = {
    m.key: m
    for m in (
        A30,
        A100_40GB,
        A100_PCIE_40GB,
        A100_80GB,
        A100_80GB_PCIE,
        H100_80GB,
        H100_PCIE,
        H200,
        RTX_4090,
    )
}
MIG_MODELS: Final[dict[str, GpuModel]] = {k: m for k, m in GPU_MODELS.items() if m.mig_capable}


def model_for_name(name: str) -> GpuModel | None:
    """The model whose NVML name is exactly `name` (`--query-gpu=name`), if known.

    Exact match on purpose: `H200` is a substring of `NVIDIA H200 NVL`, a different geometry.
    """
    for model in GPU_MODELS.values():
        if model.nvml_name == name or model.key == name:
            return model
    return None


# Ampere's MIG-capable parts (A100, A800, A30) need a GPU reset for a MIG mode change; Hopper and
# later switch without one and lose MIG mode on a reset or reboot (NVIDIA/gpu-operator#2603; an
# NVIDIA engineer in https://github.com/NVIDIA/gpu-admin-tools/issues/2: "On H100 the MIG enablement
# is controlled by driver and it's all gone by the time the VM is gone and GPU resets").
_AMPERE_NAME = re.compile(r"\bA(100|800|30)\b")


def arch_for_name(name: str) -> Arch:
    """The architecture of a GPU by its NVML name: the catalog's, else Ampere for the A100, A800
    and A30 families and Hopper-or-later for every other MIG-capable name."""
    model = model_for_name(name)
    if model is not None:
        return model.arch
    return "ampere" if _AMPERE_NAME.search(name) else "hopper"


def gi_heap_id(memory_slices: int, size: int, start: int) -> int:
    """The GPU-instance ID the driver gives an instance of `size` memory slices at `start`.

    Observed IDs fit a binary tree over the memory slices: the MIG user guide's examples (`-cgi
    9,3g.20gb` gave IDs 2 then 1; seven 1g on A100 got 13,11,12,7,8,9,10) and its listings (1g@s ->
    7+s, 2g@4 -> 5, 4g@0 -> 1, an H100 2g@0 -> 3 and 3g@4 -> 2). Used by the fake only; the agent
    reads IDs back instead of predicting them.
    """
    return memory_slices // size - 1 + start // size
