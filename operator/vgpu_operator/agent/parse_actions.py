"""Pure parsers for what nvidia-smi prints on actions: mode changes, resets, creating and
destroying instances, and `-L`, as printed in the MIG user guide
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html),
NVIDIA/gpu-operator#118 and NVIDIA/mig-parted#181, and for `-L` in
NVIDIA/cloud-native-docs@52dcb7b8d956:gpu-operator/manifests/output/mig-mixed-nvidia-smi.txt.

The printed text is a hint, never proof: nvidia-smi prints `All done.` even when the mode stays
pending (NVIDIA/gpu-operator#118), so the agent reads the state back after every action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BUS = r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"


@dataclass(frozen=True)
class ModeChange:
    bus_id: str
    enable: bool
    pending: bool  # the change did not take effect yet
    reason: str | None = None  # e.g. "Not Supported", "In use by another client"


_MODE_DONE = re.compile(rf"^(Enabled|Disabled) MIG Mode for GPU ({_BUS})$")
_MODE_PENDING = re.compile(
    rf"^Warning: MIG mode is in pending (enable|disable) state for GPU ({_BUS}):(.*)$"
)


def parse_mode_change(text: str) -> list[ModeChange]:
    """`nvidia-smi -i N -mig 0|1`: done, or pending with the driver's reason (MIG user guide,
    NVIDIA/gpu-operator#118)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        m = _MODE_DONE.match(line)
        if m:
            out.append(ModeChange(m.group(2), m.group(1) == "Enabled", pending=False))
            continue
        m = _MODE_PENDING.match(line)
        if m:
            reason = m.group(3).strip() or None
            out.append(ModeChange(m.group(2), m.group(1) == "enable", pending=True, reason=reason))
    return out


@dataclass(frozen=True)
class ResetResult:
    bus_id: str
    ok: bool
    reason: str | None = None


def parse_reset(text: str) -> list[ResetResult]:
    """`nvidia-smi -i N -r`: success, `not supported`, or the list of GPUs that could not be
    reset with the reason (NVIDIA/mig-parted#181), also in older drivers' wordings: "GPU <bus> is
    currently in use by another process." (NVIDIA/gpu-operator#118) and "Unable to reset GPU <bus>
    because it's being used by some other process ..." (public captures)."""
    out = []
    refused = False
    for raw in text.splitlines():
        line = raw.strip()
        if m := re.match(rf"^GPU ({_BUS}) was successfully reset\.$", line):
            out.append(ResetResult(m.group(1), ok=True))
        elif m := re.match(rf"^GPU ({_BUS}) is currently in use by another process\.$", line):
            out.append(ResetResult(m.group(1), ok=False, reason="In use by another process"))
        elif m := re.match(rf"^Unable to reset GPU ({_BUS}) because (.+?)(?: \(|\.|$)", line):
            out.append(ResetResult(m.group(1), ok=False, reason=m.group(2).strip()))
        elif m := re.match(rf"^Resetting GPU ({_BUS}) is not supported\.$", line):
            out.append(ResetResult(m.group(1), ok=False, reason="Not Supported"))
        elif line.startswith("The following GPUs could not be reset"):
            refused = True
        elif refused and (m := re.match(rf"^GPU ({_BUS}): (.+)$", line)):
            out.append(ResetResult(m.group(1), ok=False, reason=m.group(2).strip()))
    return out


@dataclass(frozen=True)
class CreatedGi:
    gpu: int
    gi: int
    profile: str
    profile_id: int


@dataclass(frozen=True)
class CreatedCi:
    gpu: int
    gi: int
    ci: int | None  # `-cci` prints no CI ID (MIG user guide)
    profile: str
    profile_id: int


_CGI = re.compile(
    r"^Successfully created GPU instance ID\s+(\d+) on GPU\s+(\d+) "
    r"using profile MIG (\S+) \(ID\s+(\d+)\)$"
)
_CCI = re.compile(
    r"^Successfully created compute instance(?: ID\s+(\d+))? on GPU\s+(\d+) "
    r"GPU instance ID\s+(\d+) using profile MIG (\S+) \(ID\s+(\d+)\)$"
)


def parse_created(text: str) -> tuple[list[CreatedGi], list[CreatedCi]]:
    """`mig -cgi ... [-C]` and `mig -cci`: the instances created (MIG user guide)."""
    gis: list[CreatedGi] = []
    cis: list[CreatedCi] = []
    for line in text.splitlines():
        line = line.strip()
        if m := _CGI.match(line):
            gis.append(CreatedGi(int(m.group(2)), int(m.group(1)), m.group(3), int(m.group(4))))
        elif m := _CCI.match(line):
            ci = int(m.group(1)) if m.group(1) is not None else None
            cis.append(CreatedCi(int(m.group(2)), int(m.group(3)), ci, m.group(4), int(m.group(5))))
    return gis, cis


@dataclass(frozen=True)
class Destroyed:
    gpu: int
    gi: int
    ci: int | None  # None: the GPU instance itself


def parse_destroyed(text: str) -> list[Destroyed]:
    """`mig -dci` / `mig -dgi` success lines (MIG user guide)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if m := re.match(
            r"^Successfully destroyed compute instance ID\s+(\d+) from GPU\s+(\d+) "
            r"GPU instance ID\s+(\d+)$",
            line,
        ):
            out.append(Destroyed(int(m.group(2)), int(m.group(3)), int(m.group(1))))
        elif m := re.match(
            r"^Successfully destroyed GPU instance ID\s+(\d+) from GPU\s+(\d+)$", line
        ):
            out.append(Destroyed(int(m.group(2)), int(m.group(1)), None))
    return out


@dataclass(frozen=True)
class ListedMig:
    profile: str
    device: int
    uuid: str  # "MIG-<uuid>" or the pre-R470 "MIG-GPU-<parent>/<gi>/<ci>"


@dataclass(frozen=True)
class ListedGpu:
    index: int
    name: str
    uuid: str
    migs: tuple[ListedMig, ...] = ()


def parse_list(text: str) -> list[ListedGpu]:
    """`nvidia-smi -L`, current and older spacing (NVIDIA/cloud-native-docs, see
    above; the MIG user guide)."""
    out: list[ListedGpu] = []
    for line in text.splitlines():
        if m := re.match(r"^GPU (\d+): (.+) \(UUID: (GPU-[^)]+)\)\s*$", line):
            out.append(ListedGpu(int(m.group(1)), m.group(2), m.group(3)))
        elif out and (
            m := re.match(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)\s*$", line)
        ):
            last = out[-1]
            mig = ListedMig(m.group(1), int(m.group(2)), m.group(3))
            out[-1] = ListedGpu(last.index, last.name, last.uuid, (*last.migs, mig))
    return out
