"""State of the fake nvidia-smi: the simulated GPUs of one node, in a JSON file.

The file is named by `FAKE_NVIDIA_SMI_STATE`; every call of the fake locks it, reads it, acts and
writes it back atomically, and appends one JSON line to the call log (`FAKE_NVIDIA_SMI_LOG`, else
`<state>.calls.jsonl`) so tests can count resets and destroyed instances.

Knobs in the file (helpers below set them):
- `gpus[i].processes`: fake compute processes (`gi`/`ci` optional: unset = the whole GPU;
  `namespace`: the PID namespace the process runs in, unset = the host's);
- `foreign_processes`: what `--query-compute-apps` shows of a process in another PID namespace
  than the caller's (the caller's is `FAKE_NVIDIA_SMI_PID_NAMESPACE`, unset = the host's, which
  sees every process): `hidden` (not listed) or `not_found` (listed by host PID, named
  `[Not Found]`). Both are reported from containers without the host PID namespace;
- `no_processes_message: true`: `--query-compute-apps` prints `No running processes found` (a
  line of its own) when it lists no process, as the Processes table does
  (NVIDIA/nvidia-docker#1460) and as some drivers do in the CSV form; unset, nothing (current
  drivers). A process may itself be named like that message (`HOSTILE_PROCESS_NAMES`): it is
  listed as a row like any other;
- `gpus[i].reset_supported: false`: GPU reset not supported (passthrough, MIG user guide;
  NVIDIA/mig-parted#9);
- `gpus[i].reset_blocked_by`: a non-compute client holding the GPU (e.g. nvidia-persistenced):
  resets are refused and MIG mode changes stay pending;
- `inject`: `{match, error, times}`: the next `times` calls whose argument line contains `match`
  fail with the real message of `error` (a `FailureKind`), `times: -1` for always;
- `hang`: `{match, skip, seconds, mode}`: after `skip` matching calls, the next matching call
  sleeps `seconds` before acting (a test kills the agent meanwhile). `mode` `child`: it also
  starts a child that holds its stdout open for `seconds` (a kill of the call's process group
  ends both); `detached`: that child is in a session of its own, so killing the call's process
  group does not end it and the output pipe stays open: a call that cannot be ended;
- `driver_version`: below 525 the tables use the older layout and profiles newer than the driver
  are hidden; up to 535 `mig -lgip` lists nothing for a GPU whose MIG mode is off
  (NVIDIA/mig-parted@v0.15.0:pkg/mig/discovery/discovery.go `ErrNoProfilesDiscovered`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, cast

from vgpu_devcluster.fakesmi_models import FAKE_MODELS

ENV_STATE = "FAKE_NVIDIA_SMI_STATE"
ENV_LOG = "FAKE_NVIDIA_SMI_LOG"
ENV_PID_NAMESPACE = "FAKE_NVIDIA_SMI_PID_NAMESPACE"  # the caller's; unset: the host's
DEFAULT_DRIVER = "550.90.07"

FailureKind = Literal[
    "in_use",
    "reset_unsupported",
    "insufficient_resources",
    "pending_reboot",
    "not_mig_capable",
    "timeout",
    "other",
]

# PCI bus IDs of an 8-GPU HGX board, then generated ones.
_BUSES = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")


class CiState(TypedDict):
    id: int
    profile_id: int  # compute-instance profile
    start: int  # compute slice inside the GPU instance
    size: int
    uuid: str


class GiState(TypedDict):
    id: int
    profile_id: int
    start: int
    size: int
    cis: list[CiState]


class ProcState(TypedDict):
    pid: int
    name: str
    used_memory_mib: int
    gi: NotRequired[int]
    ci: NotRequired[int]
    namespace: NotRequired[str]  # the PID namespace it runs in; unset: the host's


class GpuState(TypedDict):
    index: int
    model: str  # a key of fakesmi_models.FAKE_MODELS (models.gpu_catalog's and the doubles)
    uuid: str
    bus_id: str
    mig_current: bool
    mig_pending: bool
    reset_supported: bool
    reset_blocked_by: str
    gis: list[GiState]
    processes: list[ProcState]


class Inject(TypedDict):
    match: str
    error: FailureKind
    times: int


HangMode = Literal["sleep", "child", "detached"]


class Hang(TypedDict):
    match: str
    skip: int
    seconds: float
    mode: NotRequired[HangMode]


class NodeState(TypedDict):
    node: str
    driver_version: str
    lgip_separators: bool
    serial: int
    gpus: list[GpuState]
    inject: list[Inject]
    hang: list[Hang]
    foreign_processes: NotRequired[Literal["hidden", "not_found"]]
    no_processes_message: NotRequired[bool]


# Process names a parser that looks for the empty-list message anywhere in the listing mistakes
# for "no process" (any program can be named so: `exec -a`, a renamed binary, a pod's command).
HOSTILE_PROCESS_NAMES = (
    "No running processes found",
    "/opt/app/No running processes found --serve",
    "x\nNo running processes found",
)


def bus_id(i: int) -> str:
    bus = _BUSES[i] if i < len(_BUSES) else f"{0xC0 + i:02X}"
    return f"00000000:{bus}:00.0"


def init_state(
    path: str | os.PathLike[str],
    model: str,
    count: int,
    *,
    node: str = "node-0",
    mig: bool = False,
    driver_version: str = DEFAULT_DRIVER,
) -> NodeState:
    """Create the state file of a node with `count` GPUs of model `model` (a FAKE_MODELS key)."""
    if model not in FAKE_MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(FAKE_MODELS)}")
    import uuid

    capable = FAKE_MODELS[model].mig_capable
    gpus = [
        GpuState(
            index=i,
            model=model,
            uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'fake-gpu/{node}/{i}')}",
            bus_id=bus_id(i),
            mig_current=mig and capable,
            mig_pending=mig and capable,
            reset_supported=True,
            reset_blocked_by="",
            gis=[],
            processes=[],
        )
        for i in range(count)
    ]
    state = NodeState(
        node=node,
        driver_version=driver_version,
        lgip_separators=True,
        serial=0,
        gpus=gpus,
        inject=[],
        hang=[],
    )
    save(path, state)
    return state


def load(path: str | os.PathLike[str]) -> NodeState:
    return cast(NodeState, json.loads(Path(path).read_text()))


def save(path: str | os.PathLike[str], state: NodeState) -> None:
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(p)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive lock on the state (a sibling `.lock` file)."""
    with open(f"{os.fspath(path)}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def edit(path: str | os.PathLike[str]) -> Iterator[NodeState]:
    """Change the state under the lock: `with edit(p) as s: s["gpus"][0][...] = ...`."""
    with locked(path):
        state = load(path)
        yield state
        save(path, state)


def log_path(path: str | os.PathLike[str]) -> Path:
    return Path(os.environ.get(ENV_LOG) or f"{os.fspath(path)}.calls.jsonl")


def append_log(path: str | os.PathLike[str], entry: dict[str, Any]) -> None:
    with open(log_path(path), "a") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    p = log_path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def count_effect(path: str | os.PathLike[str], effect: str) -> int:
    """How many `effect` items ("reset", "destroyed_gi", "destroyed_ci", "created_gi", "mode")
    the call log records."""
    return sum(len(e.get("effects", {}).get(effect, [])) for e in read_log(path))


# --- knobs ------------------------------------------------------------------------------------


def add_process(
    path: str | os.PathLike[str],
    gpu: int,
    pid: int,
    name: str = "python",
    used_memory_mib: int = 1024,
    *,
    gi: int | None = None,
    namespace: str | None = None,
) -> None:
    """A compute process on GPU `gpu`; `namespace`: it runs in that PID namespace (a pod's)
    instead of the host's."""
    with edit(path) as s:
        proc = ProcState(pid=pid, name=name, used_memory_mib=used_memory_mib)
        if gi is not None:
            proc["gi"], proc["ci"] = gi, 0
        if namespace:
            proc["namespace"] = namespace
        s["gpus"][gpu]["processes"].append(proc)


def clear_processes(path: str | os.PathLike[str], gpu: int | None = None) -> None:
    with edit(path) as s:
        for g in s["gpus"]:
            if gpu is None or g["index"] == gpu:
                g["processes"] = []


def inject(path: str | os.PathLike[str], match: str, error: FailureKind, times: int = 1) -> None:
    with edit(path) as s:
        s["inject"].append(Inject(match=match, error=error, times=times))


def hang_at(
    path: str | os.PathLike[str],
    match: str,
    skip: int = 0,
    seconds: float = 3600,
    mode: HangMode = "sleep",
) -> None:
    with edit(path) as s:
        s["hang"].append(Hang(match=match, skip=skip, seconds=seconds, mode=mode))


def clear_knobs(path: str | os.PathLike[str]) -> None:
    with edit(path) as s:
        s["inject"], s["hang"] = [], []


def reboot(path: str | os.PathLike[str]) -> None:
    """A node reboot: instances and processes are gone (MIG user guide: "the created MIG devices
    are not persistent across system reboots"). On Ampere the pending MIG mode takes effect and
    persists (NVIDIA/gpu-operator#2603: "MIG mode survives a reboot on Ampere via an InfoROM
    status bit"); on Hopper and later MIG mode is gone (models.gpu_catalog.arch_for_name)."""
    with edit(path) as s:
        for g in s["gpus"]:
            after_reset(g)
            g["processes"] = []
        append_log(path, {"argv": ["<reboot>"], "rc": 0, "effects": {}})


def after_reset(gpu: GpuState) -> None:
    """What a GPU reset (or a reboot) leaves: no instances; Ampere's pending MIG mode current,
    Hopper's MIG mode off (its MIG enablement lives in the driver, see reboot)."""
    gpu["gis"] = []
    if FAKE_MODELS[gpu["model"]].arch == "ampere":
        gpu["mig_current"] = gpu["mig_pending"]
    else:
        gpu["mig_current"] = gpu["mig_pending"] = False


def kill_strays(path: str | os.PathLike[str]) -> int:
    """SIGKILL every fake nvidia-smi call still running on this state file (calls whose caller
    was killed, and the children of `hang` modes); returns how many. Linux /proc: a process of
    the fake (`fakesmi` in its command line) with this state file in its environment."""
    import signal

    mark = f"{ENV_STATE}={os.fspath(path)}".encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"fakesmi" in cmdline and mark in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def write_wrapper(directory: str | os.PathLike[str], name: str = "nvidia-smi") -> Path:
    """Write an executable `nvidia-smi` into `directory` that runs this fake with the current
    interpreter, so the agent starts it as a subprocess exactly like the real binary.

    The script is `python -m vgpu_devcluster.fakesmi "$@"` in effect, made quick: it
    skips the packages' `__init__` (its importlib.metadata lookup costs more than the fake's whole
    run) and keeps compiled bytecode in a cache under the temp directory.
    """
    import vgpu_operator

    # Both packages by path: `-S` skips site-packages, where the editable installs' finders are.
    packages = {
        "vgpu_operator": os.fspath(Path(vgpu_operator.__file__).resolve().parent),
        "vgpu_devcluster": os.fspath(Path(__file__).resolve().parent),
    }
    boot = (
        "import sys, types; "
        f"paths = {packages!r}; "
        "[sys.modules.__setitem__(n, types.ModuleType(n)) for n in paths]; "
        "[setattr(sys.modules[n], '__path__', [p]) for n, p in paths.items()]; "
        "from vgpu_devcluster.fakesmi import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    import tempfile

    cache = Path(tempfile.gettempdir()) / "vgpu-fakesmi-pycache"
    script = Path(directory) / name
    script.write_text(
        "#!/bin/sh\n"
        f'PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX="{cache}" '
        f'exec "{sys.executable}" -S -c "{boot}" "$@"\n'
    )
    script.chmod(0o755)
    return script
