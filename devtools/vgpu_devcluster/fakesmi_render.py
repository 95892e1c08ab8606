"""Output of the fake nvidia-smi, column for column as the samples of the MIG user guide.

Column positions were measured on the samples of the MIG user guide
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html) (and on the
wider tables of newer drivers in public listings): `mig -lgip` is 79 columns before driver 525 and
81 after, `mig -lgi` 54 and 59, `mig -lci` 70. The golden tests compare this output with the samples
character for character.
"""

from __future__ import annotations

from vgpu_devcluster.fakesmi_models import FAKE_MODELS
from vgpu_devcluster.fakesmi_state import CiState, GiState, GpuState, NodeState
from vgpu_operator.models.gpu_catalog import CI_PROFILE_BY_SLICES, GpuModel, MigProfile

# Driver R510 printed other GiB values for A100-40GB than current drivers (MIG user guide sample:
# 2g.10gb 9.75, 7g.40gb 39.50; current: 9.62, 39.25), and 19.62 for 3g.20gb and 4g.20gb (a real
# R510 listing of an A100-PCIE-40GB, yokatayama/e-learning@5b608b4:vmware/tkgs/
# nvidia-ai-enterprise/mig-enabled/README.md).
_R510_GIB = {
    (key, pid): gib
    for key in ("A100-SXM4-40GB", "A100-PCIE-40GB")
    for pid, gib in ((14, 9.75), (9, 19.62), (5, 19.62), (0, 39.50))
}


def driver_major(state: NodeState) -> int:
    head = state["driver_version"].split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def legacy(state: NodeState) -> bool:
    """Drivers before R525 print the narrower tables."""
    return driver_major(state) < 525


def model_of(gpu: GpuState) -> GpuModel:
    return FAKE_MODELS[gpu["model"]]


def profiles(state: NodeState, gpu: GpuState) -> list[MigProfile]:
    """The profiles this driver offers on this GPU (newer ones hidden on older drivers)."""
    major = driver_major(state)
    return [p for p in model_of(gpu).profiles if p.since_driver <= major]


def gib(state: NodeState, gpu: GpuState, p: MigProfile) -> float:
    if driver_major(state) < 525:
        return _R510_GIB.get((gpu["model"], p.id), p.memory_gib)
    return p.memory_gib


def gi_name(gpu: GpuState, gi: GiState) -> str:
    p = model_of(gpu).profile(gi["profile_id"])
    return p.name if p else f"unknown-{gi['profile_id']}"


def ci_name(gpu: GpuState, gi: GiState, ci: CiState) -> str:
    name = gi_name(gpu, gi)
    p = model_of(gpu).profile(gi["profile_id"])
    return name if p is None or ci["size"] >= p.slices else f"{ci['size']}c.{name}"


def used_slices(gpu: GpuState) -> tuple[set[int], int]:
    """(memory slices in use, compute slices in use)."""
    mem: set[int] = set()
    compute = 0
    for gi in gpu["gis"]:
        mem.update(range(gi["start"], gi["start"] + gi["size"]))
        p = model_of(gpu).profile(gi["profile_id"])
        compute += p.slices if p else 0
    return mem, compute


def ci_profiles(gpu: GpuState, gi: GiState) -> list[tuple[int, str, int, bool]]:
    """The compute-instance profiles of a GPU instance as `mig -lcip` lists them:
    (CI profile ID, name, compute slices, the default `*`). Partial ones first (`1c.3g.20gb`), the
    full one last and marked default, as in the listings of a 2g, 3g and 4g instance in
    yokatayama/e-learning@5b608b4 (see _R510_GIB) and the MIG user guide's `-lcip -gi 1`
    (`1c.3g.20gb 0`, `2c.3g.20gb 1`, `3g.20gb 2*`). Which partial sizes a 7g instance offers (1c-4c)
    is reconstructed from the names mig-parted knows (`1c.7g.40gb` ... `4c.7g.40gb`)."""
    p = model_of(gpu).profile(gi["profile_id"])
    if p is None:
        return []
    name = p.name
    partial = [n for n in (1, 2, 3, 4) if n < p.slices and (n != 3 or p.slices % 3 != 1)]
    out = [(CI_PROFILE_BY_SLICES[n], f"{n}c.{name}", n, False) for n in partial]
    out.append((p.ci_profile_id, name, p.slices, True))
    return out


def free_count(state: NodeState, gpu: GpuState, p: MigProfile) -> int:
    """The "Free" of Free/Total: how many more instances of `p` fit right now."""
    if not gpu["mig_current"]:
        return p.max_count
    mem, compute = used_slices(gpu)
    left = p.max_count - sum(1 for gi in gpu["gis"] if gi["profile_id"] == p.id)
    room = 0
    for start in p.placements:
        span = set(range(start, start + p.size))
        if not span & mem:
            room += 1
            mem |= span
    fit = (model_of(gpu).compute_slices - compute) // p.slices
    return max(0, min(left, room, fit))


def _border(width: int) -> str:
    return "+" + "-" * (width - 2) + "+"


def _title(text: str, width: int) -> str:
    return f"| {text}".ljust(width - 1) + "|"


def render_lgip(state: NodeState, gpus: list[GpuState]) -> str:
    narrow = legacy(state)
    pad = 0 if narrow else 2
    width = 79 + pad
    separators = narrow or state["lgip_separators"]
    lines = [
        _border(width),
        _title("GPU instance profiles:", width),
        "| GPU   Name"
        + " " * (13 + pad)
        + "ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        "|" + " " * (30 + pad) + "Free/Total   GiB              CE    JPEG  OFA  |",
        "|" + "=" * (width - 2) + "|",
    ]
    for gpu in gpus:
        for p in profiles(state, gpu):
            lines.append(
                "|"
                + f"{gpu['index']:>4}  "
                + f"MIG {p.name}".ljust(17 + pad)
                + f"{p.id:>3}"
                + " " * 5
                + f"{free_count(state, gpu, p)}/{p.max_count}".ljust(11)
                + f"{gib(state, gpu, p):.2f}".ljust(11)
                + "No".ljust(7)
                + f"{p.sm}".ljust(7)
                + f"{p.dec}".ljust(6)
                + f"{p.enc}".ljust(4)
                + "|"
            )
            lines.append(
                "|"
                + " " * (60 + pad)
                + f"{p.ce:>2}"
                + " " * 5
                + f"{p.jpeg}".ljust(6)
                + f"{p.ofa}".ljust(4)
                + "|"
            )
            if separators:
                lines.append(_border(width))
    if not separators:
        lines.append(_border(width))
    return "\n".join(lines)


def render_lgipp(state: NodeState, gpus: list[GpuState]) -> str:
    lines = []
    for gpu in gpus:
        for p in profiles(state, gpu):
            starts = ",".join(str(s) for s in p.placements)
            label = "Placements:" if len(p.placements) > 1 else "Placement :"
            lines.append(
                f"GPU {gpu['index']:2d} Profile ID {p.id:2d} {label} {{{starts}}}:{p.size}"
            )
    return "\n".join(lines)


def gi_order(gpu: GpuState) -> list[GiState]:
    """Listing order seen in the samples: higher profile ID first, then instance ID."""
    return sorted(gpu["gis"], key=lambda g: (-g["profile_id"], g["id"]))


def render_lgi(state: NodeState, gpus: list[GpuState]) -> str:
    pad = 0 if legacy(state) else 5
    width = 54 + pad
    lines = [
        _border(width),
        _title("GPU instances:", width),
        "| GPU   Name" + " " * (10 + pad) + "Profile  Instance   Placement  |",
        "|" + " " * (23 + pad) + "ID       ID       Start:Size |",
        "|" + "=" * (width - 2) + "|",
    ]
    for gpu in gpus:
        for gi in gi_order(gpu):
            lines.append(
                "|"
                + f"{gpu['index']:>4}  "
                + f"MIG {gi_name(gpu, gi)}".ljust(16 + pad)
                + f"{gi['profile_id']:>3}"
                + f"{gi['id']:>9}"
                + f"{gi['start']}:{gi['size']}".rjust(13)
                + " " * 5
                + "|"
            )
            lines.append(_border(width))
    return "\n".join(lines)


_LCI_HEAD = (
    "+--------------------------------------------------------------------+",
    "| Compute instances:                                                 |",
    "| GPU     GPU       Name             Profile   Instance   Placement  |",
    "|       Instance                       ID        ID       Start:Size |",
    "|         ID                                                         |",
    "|====================================================================|",
)


def render_lci(gpus: list[GpuState], gi_filter: set[int] | None) -> str:
    lines = list(_LCI_HEAD)
    for gpu in gpus:
        for gi in gi_order(gpu):
            if gi_filter is not None and gi["id"] not in gi_filter:
                continue
            for ci in sorted(gi["cis"], key=lambda c: c["id"]):
                lines.append(
                    "|"
                    + f"{gpu['index']:>4}"
                    + f"{gi['id']:>7}"
                    + " " * 7
                    + f"MIG {ci_name(gpu, gi, ci)}".ljust(19)
                    + f"{ci['profile_id']:>3}"
                    + f"{ci['id']:>10}"
                    + f"{ci['start']}:{ci['size']}".rjust(13)
                    + " " * 5
                    + "|"
                )
                lines.append(_LCI_HEAD[0])
    return "\n".join(lines)


_LCIP_HEAD = (
    "+" + "-" * 86 + "+",
    "| Compute instance profiles:".ljust(87) + "|",
    "| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |",
    "|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |",
    "|         ID                                                          CE    JPEG       |",
    "|" + "=" * 86 + "|",
)


def render_lcip(gpus: list[GpuState], gi_filter: set[int] | None) -> str:
    """`mig -lcip [-gi G]`: per GPU instance its compute-instance profiles, the default one
    marked `*`, Free/Total from the compute slices its CIs use. Columns measured on the listings
    named in ci_profiles; SM of a partial profile is N times the GPU's 1-slice SM count."""
    lines = list(_LCIP_HEAD)
    for gpu in gpus:
        model = model_of(gpu)
        one = min((p.sm for p in model.profiles if p.slices == 1), default=0)
        for gi in gi_order(gpu):
            if gi_filter is not None and gi["id"] not in gi_filter:
                continue
            p = model.profile(gi["profile_id"])
            if p is None:
                continue
            used = sum(c["size"] for c in gi["cis"])
            for cid, name, n, default in ci_profiles(gpu, gi):
                total = p.slices // n
                free = min(total, (p.slices - used) // n)
                sm = p.sm if default else one * n
                mark = "*" if default else " "
                lines.append(
                    "|"
                    + f"{gpu['index']:>4}"
                    + f"{gi['id']:>7}"
                    + " " * 7
                    + f"MIG {name}".ljust(20)
                    + f"{cid:>2}{mark}"
                    + " " * 5
                    + f"{free}/{total}".ljust(14)
                    + f"{sm:>2}"
                    + f"{p.dec:>9}"
                    + f"{p.enc:>6}"
                    + f"{p.ofa:>6}"
                    + " " * 3
                    + "|"
                )
                lines.append("|" + " " * 69 + f"{p.ce:>2}" + f"{p.jpeg:>6}" + " " * 9 + "|")
                lines.append(_LCIP_HEAD[0])
    return "\n".join(lines)


def render_list(gpus: list[GpuState]) -> str:
    """`nvidia-smi -L` (current drivers' spacing, as in NVIDIA/cloud-native-docs@52dcb7b8d956:
    gpu-operator/manifests/output/mig-mixed-nvidia-smi.txt)."""
    lines = []
    for gpu in gpus:
        lines.append(f"GPU {gpu['index']}: {model_of(gpu).nvml_name} (UUID: {gpu['uuid']})")
        if not gpu["mig_current"]:
            continue
        n = 0
        for gi in sorted(gpu["gis"], key=lambda g: g["id"]):
            for ci in sorted(gi["cis"], key=lambda c: c["id"]):
                name = f"MIG {ci_name(gpu, gi, ci)}"
                lines.append(f"  {name:<16}Device {n:>2}: (UUID: {ci['uuid']})")
                n += 1
    return "\n".join(lines)
