"""Pure parsers for nvidia-smi's MIG output formats, and error classification.

The formats are the ones the MIG user guide prints
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html).
Tables are parsed by row shape, not by column position: `mig -lgip` comes in two layouts (the
79-column one with a separator row after each profile, and the 81-column one of newer drivers, with
or without separators; the 79-column one as in NVIDIA/mig-parted#97), `mig -lgi` in a 54- and a
59-column width, and `mig -lci` with or without the Placement column (the user guide's `-lci -gi 1`
has none). Lines that match no row shape (borders, headers, a `...` in a quoted sample) are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

QUERY_GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "mig.mode.current",
    "mig.mode.pending",
)
# process_name last: it is the only field that may itself contain ", ".
COMPUTE_APPS_FIELDS = ("gpu_bus_id", "gpu_uuid", "pid", "used_memory", "process_name")


class SmiErrorKind(StrEnum):
    IN_USE = "in use by another client"
    RESET_NOT_SUPPORTED = "reset not supported"
    INSUFFICIENT_RESOURCES = "insufficient resources"
    PENDING_REBOOT = "pending reset or reboot required"
    NOT_MIG_CAPABLE = "not MIG-capable"
    NOT_FOUND = "not found"
    TIMEOUT = "timeout"
    UNHEALTHY = "could not be ended"  # a call still running after its kill: the GPU is stuck
    OTHER = "other"


# "in use" as drivers word it: "In use by another client" (MIG user guide), "... is currently being
# used by one or more other processes" (NVIDIA/gpu-operator#118), "GPU 00000000:C1:00.0 is currently
# in use by another process." (`--gpu-reset` in NVIDIA/gpu-operator#118) and "Unable to reset GPU
# ... because it's being used by some other process" (older drivers, public captures).
_IN_USE = re.compile(
    r"In use by another client|currently being used by one or more"
    r"|is currently in use by another process|being used by some other process"
)


def classify(output: str) -> SmiErrorKind:
    """The class of an nvidia-smi error message (texts as in the MIG user guide,
    NVIDIA/gpu-operator#118 and NVIDIA/mig-parted#181)."""
    if re.search(r"Resetting GPU \S+ is not supported", output):
        return SmiErrorKind.RESET_NOT_SUPPORTED
    if _IN_USE.search(output):
        return SmiErrorKind.IN_USE
    if re.search(r"pending (enable|disable) state|Reboot the system|Reset required", output):
        return SmiErrorKind.PENDING_REBOOT
    if "Insufficient Resources" in output:
        return SmiErrorKind.INSUFFICIENT_RESOURCES
    if re.search(r"No MIG-supported devices|MIG Mode for GPU \S+: Not Supported", output):
        return SmiErrorKind.NOT_MIG_CAPABLE
    if re.search(r"Not Found|No (GPU|compute) instances found|No MIG-enabled devices", output):
        return SmiErrorKind.NOT_FOUND
    return SmiErrorKind.OTHER


# --- CSV queries (the MIG user guide's `--query-gpu ... --format=csv`) ---------------------------


def parse_csv(text: str, fields: Sequence[str] | None = None) -> list[dict[str, str]]:
    """`--format=csv[,noheader][,nounits]` rows as dicts. Without `fields` the first line is
    the header (units such as ` [MiB]` are dropped from its names)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if fields is None:
        if not lines:
            return []
        fields = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(",")]
        lines = lines[1:]
    out = []
    for line in lines:
        values = [v.strip() for v in line.split(", ", len(fields) - 1)]
        if len(values) == len(fields):
            out.append(dict(zip(fields, values, strict=True)))
    return out


def mig_mode(value: str) -> bool | None:
    """`Enabled`/`Disabled`; `[N/A]` (not MIG-capable) and anything else -> None."""
    return {"Enabled": True, "Disabled": False}.get(value.strip())


def mib(value: str) -> int | None:
    m = re.match(r"^\s*(\d+)(?:\s*MiB)?\s*$", value)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class GpuRow:
    index: int
    uuid: str
    name: str
    bus_id: str
    memory_mib: int
    mig_current: bool | None
    mig_pending: bool | None


def parse_gpus(text: str) -> list[GpuRow]:
    """`--query-gpu=index,uuid,name,pci.bus_id,memory.total,mig.mode.current,mig.mode.pending`,
    with or without header and units."""
    has_header = text.lstrip().startswith("index")
    rows = parse_csv(text, None if has_header else QUERY_GPU_FIELDS)
    return [
        GpuRow(
            index=int(r["index"]),
            uuid=r["uuid"],
            name=r["name"],
            bus_id=r["pci.bus_id"],
            memory_mib=mib(r["memory.total"]) or 0,
            mig_current=mig_mode(r["mig.mode.current"]),
            mig_pending=mig_mode(r["mig.mode.pending"]),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class ProcRow:
    bus_id: str
    gpu_uuid: str
    pid: int
    used_memory_mib: int | None
    name: str


# What nvidia-smi prints instead of rows when no compute process runs: a line of its own, the
# only one after the header. Current drivers print nothing at all for `--query-compute-apps`
# (devtools fakesmi.query_apps does the same); the message is the Processes table's own row
# (`|  No running processes found  |`, quoted in NVIDIA/nvidia-docker#1460) and some drivers print
# it in the CSV form too. Anywhere else (a process named like it, or with it after a newline) it
# is no such thing.
NO_PROCESSES = "No running processes found"


class ProcessListError(ValueError):
    """A `--query-compute-apps` line that is neither a row, the header nor the empty message."""


def parse_compute_apps(text: str) -> list[ProcRow]:
    """`--query-compute-apps=gpu_bus_id,gpu_uuid,pid,used_memory,process_name
    --format=csv,noheader,nounits` (field order ours; the CSV format of the MIG user guide's
    `--query-gpu`; devtools fakesmi.query_apps prints the same), line by line: one process per
    line, the name last (it may hold `, `).

    The empty-list message counts only as a whole line, the only one besides the header. A line
    after a row that is no row itself continues that row's process name (nvidia-smi prints names
    as they are, newlines included); any other line that is no row raises ProcessListError: a
    listing the agent cannot read must not read as "no process"."""
    lines = [line for line in text.splitlines() if line.strip()]
    fields: Sequence[str] = COMPUTE_APPS_FIELDS
    if lines and lines[0].lstrip().startswith("gpu_bus_id"):
        fields = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(",")]
        lines = lines[1:]
    if len(lines) == 1 and lines[0].strip() == NO_PROCESSES:
        return []
    out: list[ProcRow] = []
    for line in lines:
        row = _proc_row(line, fields)
        if row is not None:
            out.append(row)
        elif out:
            last = out[-1]
            out[-1] = replace(last, name=f"{last.name}\n{line.strip()}")
        else:
            raise ProcessListError(f"not a compute process row: {line!r}")
    return out


def _proc_row(line: str, fields: Sequence[str]) -> ProcRow | None:
    values = [v.strip() for v in line.split(", ", len(fields) - 1)]
    if len(values) != len(fields):
        return None
    r = dict(zip(fields, values, strict=True))
    pid = r.get("pid", "")
    if not pid.isascii() or not pid.isdigit() or not r.get("gpu_bus_id") or not r.get("gpu_uuid"):
        return None
    used = r.get("used_memory", r.get("used_gpu_memory", ""))
    return ProcRow(r["gpu_bus_id"], r["gpu_uuid"], int(pid), mib(used), r.get("process_name", ""))


# --- MIG tables (`-lgip`, `-lgipp`, `-lgi`, `-lci`, as in the MIG user guide) -------------------

_LGIP_ROW = re.compile(
    r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(Yes|No)"
    r"\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$"
)
_LGIP_ENGINES = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$")


@dataclass(frozen=True)
class ProfileRow:
    gpu: int
    name: str  # without "MIG "
    id: int
    free: int
    total: int
    memory_gib: float
    p2p: bool
    sm: int
    dec: int
    enc: int
    ce: int | None = None
    jpeg: int | None = None
    ofa: int | None = None


def parse_lgip(text: str) -> list[ProfileRow]:
    """`nvidia-smi mig -lgip`: one row per profile, the next line CE/JPEG/OFA."""
    out: list[ProfileRow] = []
    pending: ProfileRow | None = None
    for line in text.splitlines():
        line = line.rstrip()
        m = _LGIP_ROW.match(line)
        if m:
            if pending is not None:
                out.append(pending)
            g = m.groups()
            pending = ProfileRow(
                gpu=int(g[0]),
                name=g[1],
                id=int(g[2]),
                free=int(g[3]),
                total=int(g[4]),
                memory_gib=float(g[5]),
                p2p=g[6] == "Yes",
                sm=int(g[7]),
                dec=int(g[8]),
                enc=int(g[9]),
            )
            continue
        e = _LGIP_ENGINES.match(line)
        if e and pending is not None:
            ce, jpeg, ofa = (int(x) for x in e.groups())
            out.append(ProfileRow(**{**pending.__dict__, "ce": ce, "jpeg": jpeg, "ofa": ofa}))
            pending = None
            continue
        if pending is not None:  # no engine line followed (e.g. elided): keep the row
            out.append(pending)
            pending = None
    if pending is not None:
        out.append(pending)
    return out


_LGIPP = re.compile(r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}:(\d+)")


@dataclass(frozen=True)
class PlacementRow:
    gpu: int
    profile_id: int
    starts: tuple[int, ...]
    size: int


def parse_lgipp(text: str) -> list[PlacementRow]:
    """`nvidia-smi mig -lgipp`: `GPU  0 Profile ID  9 Placements: {0,4}:4` (MIG user guide)."""
    out = []
    for line in text.splitlines():
        m = _LGIPP.match(line.strip())
        if m:
            starts = tuple(int(x) for x in m.group(3).replace(" ", "").split(",") if x)
            out.append(PlacementRow(int(m.group(1)), int(m.group(2)), starts, int(m.group(4))))
    return out


_LGI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")


@dataclass(frozen=True)
class GiRow:
    gpu: int
    name: str
    profile_id: int
    gi: int
    start: int
    size: int


def parse_lgi(text: str) -> list[GiRow]:
    """`nvidia-smi mig -lgi` (either width); `No GPU instances found` -> []."""
    out = []
    for line in text.splitlines():
        m = _LGI_ROW.match(line.rstrip())
        if m:
            g = [m.group(1), *m.groups()[2:]]
            gpu, pid, gi, start, size = (int(x) for x in g)
            out.append(GiRow(gpu, m.group(2), pid, gi, start, size))
    return out


_LCI_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)(?:\s+(\d+):(\d+))?\s*\|$")


@dataclass(frozen=True)
class CiRow:
    gpu: int
    gi: int
    name: str
    profile_id: int
    ci: int
    start: int | None
    size: int | None


def parse_lci(text: str) -> list[CiRow]:
    """`nvidia-smi mig -lci`, Placement column optional; `No compute instances found` -> []."""
    out = []
    for line in text.splitlines():
        m = _LCI_ROW.match(line.rstrip())
        if m:
            g = m.groups()
            start = int(g[5]) if g[5] is not None else None
            size = int(g[6]) if g[6] is not None else None
            out.append(CiRow(int(g[0]), int(g[1]), g[2], int(g[3]), int(g[4]), start, size))
    return out


_LCIP_ROW = re.compile(
    r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)(\*?)\s+(\d+)/(\d+)"
    r"\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$"
)


@dataclass(frozen=True)
class CiProfileRow:
    gpu: int
    gi: int
    name: str  # "1c.3g.20gb", or the GI's own name for a profile spanning it
    id: int  # compute-instance profile ID, what `-cci` takes
    default: bool  # marked `*`: what `-C` and a bare `-cci` create
    free: int
    total: int


def parse_lcip(text: str) -> list[CiProfileRow]:
    """`nvidia-smi mig [-i N] [-gi G] -lcip`: per GPU instance, its compute-instance profiles
    (`|   0      1       MIG 3g.20gb          2*     0/1   ...`, MIG user guide and public
    listings); the second line of each profile (CE, JPEG) has no row shape of its own and is
    skipped."""
    out = []
    for line in text.splitlines():
        m = _LCIP_ROW.match(line.rstrip())
        if m:
            g = m.groups()
            out.append(
                CiProfileRow(
                    gpu=int(g[0]),
                    gi=int(g[1]),
                    name=g[2],
                    id=int(g[3]),
                    default=g[4] == "*",
                    free=int(g[5]),
                    total=int(g[6]),
                )
            )
    return out
