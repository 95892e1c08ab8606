"""A fake `nvidia-smi`: a hardware double for the node agent's tests.

Run as `python -m vgpu_devcluster.fakesmi ARGS...` (fakesmi_state.write_wrapper puts an
executable `nvidia-smi` script into a directory), with the simulated GPUs of one node in the JSON
file named by `FAKE_NVIDIA_SMI_STATE` (fakesmi_state.init_state creates it). Output follows the
samples of the MIG user guide
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html) and of
NVIDIA/gpu-operator#118 and NVIDIA/mig-parted#181 character for character (tested against them);
profiles, IDs, memory and placements come from models.gpu_catalog, the table the planner uses too,
and for the doubles of GPUs it does not confirm, from their cited listings (fakesmi_models).

State machine (MIG user guide; NVIDIA/mig-parted#9, NVIDIA/gpu-operator#118, NVIDIA/gpu-operator
PR #2603) and the conservative choices where those sources are silent:
- MIG mode: Hopper switches at once. Ampere switches at once too when nothing holds the GPU: the
  driver resets it itself ("the driver will attempt to reset the GPU so that MIG mode can take
  effect", MIG user guide; NVIDIA/gpu-operator PR #2603), logged as a `reset` effect. It goes
  pending with the MIG user guide's warning ("Reboot the system or try nvidia-smi --gpu-reset") when
  the GPU cannot be reset (`reset_supported` false: passthrough). With compute processes on the
  GPU (or `reset_blocked_by` set, or instances left when disabling) the mode goes pending "In use
  by another client" on any architecture. Output ends `All done.` and exit code 0 either way
  (only the current and pending modes read back tell what happened).
- `-r`: refused while processes run or a client holds the GPU (text of NVIDIA/mig-parted#181, exit
  255); "Resetting GPU ... is not supported." when `reset_supported` is false (exit 3, UNCONFIRMED
  code). A reset removes every instance of the GPU; on Ampere it makes the pending mode current, on
  Hopper it clears MIG mode (fakesmi_state.after_reset; a reboot does the same).
- `mig -cgi ... -C` creates the GPU instance's default compute instance: on Hopper's 1g
  double-memory profiles that is CI profile 7, not 0 (models.gpu_catalog.HOPPER_1G_CI); `mig
  -lcip` lists each GPU instance's compute-instance profiles with the default marked `*`, and
  `-cci` refuses a profile the GPU instance does not list (Invalid Argument, reconstructed).
- `--query-compute-apps` shows only what the caller's PID namespace can see
  (fakesmi_state: `namespace` of a process, `foreign_processes`).
- `-mig` on a GPU that is not MIG-capable prints "Unable to enable MIG Mode for GPU <bus>: Not
  Supported" / "Treating as warning and moving on." (UNCONFIRMED text; mode stays [N/A]).
- Injected failures (`inject` in the state) print the real message of their class for the command
  at hand; `timeout` hangs like `hang`, whose `child`/`detached` modes leave a child holding the
  output pipe open. See fakesmi_state for every knob.
- `FAKE_NVIDIA_SMI_LATENCY` makes each call take the seconds of its kind (fakesmi_latency), for
  benchmarks; unset, every call answers at once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from vgpu_devcluster.fakesmi_latency import SmiLatency
from vgpu_devcluster.fakesmi_mig import (
    IN_USE,
    RC_INSUFFICIENT,
    RC_NOT_FOUND,
    RC_OTHER,
    MigArgs,
    Result,
    run_mig,
)
from vgpu_devcluster.fakesmi_render import model_of, render_list
from vgpu_devcluster.fakesmi_state import (
    ENV_PID_NAMESPACE,
    ENV_STATE,
    FailureKind,
    GpuState,
    HangMode,
    NodeState,
    after_reset,
    append_log,
    load,
    locked,
    save,
)

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
USAGE = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
_BUSY_TEXT = (
    "is currently being used by one or more other processes (e.g. CUDA application or a "
    "monitoring application such as another instance of nvidia-smi). Please first kill all "
    "processes using the device and retry the command or reboot the system to make MIG mode "
    "effective."
)


class Usage(Exception):
    pass


_MIG_ACTIONS = {
    "-lgip": "lgip",
    "--list-gpu-instance-profiles": "lgip",
    "-lgipp": "lgipp",
    "--list-gpu-instance-possible-placements": "lgipp",
    "-lgi": "lgi",
    "--list-gpu-instances": "lgi",
    "-lci": "lci",
    "--list-compute-instances": "lci",
    "-lcip": "lcip",
    "--list-compute-instance-profiles": "lcip",
    "-cgi": "cgi",
    "--create-gpu-instance": "cgi",
    "-cci": "cci",
    "--create-compute-instance": "cci",
    "-dci": "dci",
    "--destroy-compute-instance": "dci",
    "-dgi": "dgi",
    "--destroy-gpu-instance": "dgi",
}
_VALUED = {"-i", "--id", "-mig", "--multi-instance-gpu", "-gi", "--gpu-instance-id", "-ci"}
_VALUED |= {"--compute-instance-id", "-cgi", "--create-gpu-instance"}


def parse_args(args: Sequence[str]) -> tuple[dict[str, str], MigArgs | None]:
    """Flags as {canonical: value} and, for `mig`, the MIG action."""
    opts: dict[str, str] = {}
    mig: MigArgs | None = None
    canon = {"--id": "-i", "--multi-instance-gpu": "-mig", "--gpu-reset": "-r"}
    canon |= {"--list-gpus": "-L", "--gpu-instance-id": "-gi", "--compute-instance-id": "-ci"}
    canon |= {"--default-compute-instance": "-C", "--create-gpu-instance": "-cgi"}
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "mig" and mig is None and not opts.get("-mig"):
            mig = MigArgs(action="")
        elif "=" in tok and tok.startswith("--"):
            key, _, value = tok.partition("=")
            opts[key] = value
        elif mig is not None and tok in _MIG_ACTIONS and _MIG_ACTIONS[tok] == "cci":
            mig.action = "cci"
            if i + 1 < len(args) and not args[i + 1].startswith("-"):
                mig.cci = [x.strip() for x in args[i + 1].split(",") if x.strip()]
                i += 1
        elif mig is not None and tok in _MIG_ACTIONS and _MIG_ACTIONS[tok] != "cgi":
            mig.action = _MIG_ACTIONS[tok]
        elif tok in _VALUED:
            if i + 1 >= len(args):
                raise Usage(USAGE)
            opts[canon.get(tok, tok)] = args[i + 1]
            i += 1
        else:
            opts[canon.get(tok, tok)] = ""
        i += 1
    if mig is not None:
        if "-cgi" in opts:
            mig.action, mig.cgi = "cgi", _split_profiles(opts["-cgi"])
        mig.gi = _ints(opts.get("-gi"))
        mig.ci = _ints(opts.get("-ci"))
        mig.default_ci = "-C" in opts
        if not mig.action:
            raise Usage(USAGE)
    return opts, mig


def _split_profiles(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _ints(value: str | None) -> list[int] | None:
    return None if value is None else [int(v) for v in value.split(",") if v.strip()]


def select(state: NodeState, ids: str | None) -> list[GpuState]:
    """GPUs named by `-i` (indices, bus IDs or UUIDs, comma-separated); all without it."""
    if ids is None:
        return list(state["gpus"])
    out = []
    for tok in ids.split(","):
        tok = tok.strip()
        for g in state["gpus"]:
            if tok == str(g["index"]) or tok.upper() in (g["bus_id"].upper(), g["uuid"].upper()):
                out.append(g)
                break
        else:
            raise LookupError(tok)
    return out


def _mode_text(value: bool, capable: bool) -> str:
    return "[N/A]" if not capable else ("Enabled" if value else "Disabled")


def query_gpu(gpus: list[GpuState], fields: str, fmt: str) -> Result:
    header = {"memory.total": "memory.total [MiB]"}
    rows = []
    for g in gpus:
        m = model_of(g)
        values = {
            "index": str(g["index"]),
            "uuid": g["uuid"],
            "name": m.nvml_name,
            "pci.bus_id": g["bus_id"],
            "memory.total": f"{m.memory_mib}" + ("" if "nounits" in fmt else " MiB"),
            "mig.mode.current": _mode_text(g["mig_current"], m.mig_capable),
            "mig.mode.pending": _mode_text(g["mig_pending"], m.mig_capable),
            "count": str(len(gpus)),
        }
        names = fields.split(",")
        for f in names:
            if f not in values:
                return Result(f'Field "{f}" is not a valid field to query.', 2)
        rows.append(", ".join(values[f] for f in names))
    if "noheader" not in fmt:
        rows.insert(0, ", ".join(header.get(f, f) for f in fields.split(",")))
    return Result("\n".join(rows))


NOT_FOUND_NAME = "[Not Found]"
NO_PROCESSES = "No running processes found"


def visible_name(state: NodeState, proc: dict[str, object]) -> str | None:
    """The process name the caller sees, or None when the process is invisible to it: a caller
    in the host PID namespace (FAKE_NVIDIA_SMI_PID_NAMESPACE unset) sees every process; one in
    another namespace sees its own, and the others hidden or as `[Not Found]` (the state's
    `foreign_processes`; public captures show "50983, [Not Found]" from a container)."""
    caller = os.environ.get(ENV_PID_NAMESPACE, "")
    if not caller or proc.get("namespace", "") == caller:
        return str(proc["name"])
    return NOT_FOUND_NAME if state.get("foreign_processes") == "not_found" else None


def query_apps(state: NodeState, gpus: list[GpuState], fields: str, fmt: str) -> Result:
    header = {"used_memory": "used_gpu_memory [MiB]"}
    rows = []
    for g in gpus:
        for p in sorted(g["processes"], key=lambda p: p["pid"]):
            name = visible_name(state, dict(p))
            if name is None:
                continue
            values = {
                "gpu_bus_id": g["bus_id"],
                "gpu_uuid": g["uuid"],
                "gpu_name": model_of(g).nvml_name,
                "pid": str(p["pid"]),
                "process_name": name,
                "used_memory": f"{p['used_memory_mib']}" + ("" if "nounits" in fmt else " MiB"),
            }
            rows.append(", ".join(values.get(f, "[N/A]") for f in fields.split(",")))
    if not rows and state.get("no_processes_message"):
        rows.append(NO_PROCESSES)  # a line of its own (fakesmi_state: `no_processes_message`)
    if "noheader" not in fmt:
        rows.insert(0, ", ".join(header.get(f, f) for f in fields.split(",")))
    return Result("\n".join(rows))


def reset(gpus: list[GpuState]) -> Result:
    res = Result()
    unsupported = [g for g in gpus if not g["reset_supported"]]
    if unsupported:
        res.out = "\n".join(f"Resetting GPU {g['bus_id']} is not supported." for g in unsupported)
        res.rc = 3
        return res
    busy = [g for g in gpus if g["processes"] or g["reset_blocked_by"]]
    if busy:
        return refused(busy)
    for g in gpus:
        after_reset(g)
        res.effect("reset", g["index"])
    res.out = "\n".join(f"GPU {g['bus_id']} was successfully reset." for g in gpus)
    return res


def refused(busy: list[GpuState]) -> Result:
    n = len(busy)
    lines = ["The following GPUs could not be reset:"]
    lines += [f"  GPU {g['bus_id']}: {IN_USE}" for g in busy]
    these = "this device" if n == 1 else "these devices"
    lines += [
        "",
        f"{n} device{' is' if n == 1 else 's are'} currently being used by one or more other "
        "processes (e.g., Fabric Manager, CUDA application, graphics application such as an X "
        "server, or a monitoring application such as another instance of nvidia-smi). Please "
        f"first kill all processes using {these} and all compute applications running in the "
        "system.",
    ]
    return Result("\n".join(lines), RC_OTHER)


def _pending_lines(g: GpuState, enable: bool, reason: str) -> list[str]:
    word = "enable" if enable else "disable"
    head = f"Warning: MIG mode is in pending {word} state for GPU {g['bus_id']}:{reason}"
    if reason == IN_USE:
        return [head, f"{g['bus_id']} {_BUSY_TEXT}"]
    return [
        head,
        f"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU "
        f"{g['bus_id']}",
    ]


def set_mode(gpus: list[GpuState], enable: bool, forced: FailureKind | None = None) -> Result:
    res = Result()
    lines: list[str] = []
    verb, word = ("Enabled", "enable") if enable else ("Disabled", "disable")
    for g in gpus:
        m = model_of(g)
        if not m.mig_capable or forced == "not_mig_capable":
            lines += [f"Unable to {word} MIG Mode for GPU {g['bus_id']}: Not Supported"]
            lines += ["Treating as warning and moving on."]
            continue
        if enable == g["mig_current"] and forced is None:
            g["mig_pending"] = enable  # cancels a pending change; nothing to reset
            lines.append(f"{verb} MIG Mode for GPU {g['bus_id']}")
            continue
        g["mig_pending"] = enable
        res.effect("mode", g["index"], int(enable))
        busy = g["processes"] or g["reset_blocked_by"] or (not enable and g["gis"])
        unresettable = m.mode_change_needs_reset and not g["reset_supported"]
        if forced == "in_use" or (busy and forced is None):
            lines += _pending_lines(g, enable, IN_USE)
        elif forced in ("reset_unsupported", "pending_reboot") or unresettable:
            lines += _pending_lines(g, enable, "Not Supported")
        else:
            g["mig_current"] = enable
            g["gis"] = []
            if m.mode_change_needs_reset:  # Ampere: the driver reset the GPU itself
                res.effect("reset", g["index"])
            lines.append(f"{verb} MIG Mode for GPU {g['bus_id']}")
    lines.append("All done.")
    res.out = "\n".join(lines)
    return res


_MESSAGES: dict[str, tuple[str, int]] = {
    "in_use": (IN_USE, RC_OTHER),
    "insufficient_resources": ("Insufficient Resources", RC_INSUFFICIENT),
    "reset_unsupported": ("Not Supported", 3),
    "pending_reboot": ("Reset required", RC_OTHER),
    "not_mig_capable": ("Not Supported", 3),
    "other": ("Unknown Error", RC_OTHER),
}


def injected(
    gpus: list[GpuState], opts: dict[str, str], mig: MigArgs | None, kind: FailureKind
) -> Result:
    """The failure `kind` as nvidia-smi reports it for this command."""
    g = gpus[0]
    text, rc = _MESSAGES.get(kind, _MESSAGES["other"])
    if mig is None and "-r" in opts:
        if kind == "in_use":
            return refused([g])
        if kind in ("reset_unsupported", "pending_reboot"):
            return Result(f"Resetting GPU {g['bus_id']} is not supported.", 3)
    if mig is None and "-mig" in opts:
        return set_mode([g], opts["-mig"] == "1", kind)
    if mig is not None and mig.action == "cgi":
        tok = mig.cgi[0].partition(":")[0] if mig.cgi else "?"
        line = f"Unable to create a GPU instance on GPU {g['index']:2d} using profile {tok}: {text}"
        return Result(f"{line}\nFailed to create GPU instances: {text}", rc)
    if mig is not None and mig.action in ("dgi", "dci"):
        gi = (mig.gi or [0])[0]
        what = "GPU" if mig.action == "dgi" else "compute"
        line = f"Unable to destroy {what} instance ID {gi:2d} from GPU {g['index']:2d}: {text}"
        return Result(f"{line}\nFailed to destroy {what} instances: {text}", rc)
    if kind == "not_mig_capable":
        return Result("No MIG-supported devices found.", RC_NOT_FOUND)
    return Result(f"Unable to complete the request on GPU {g['bus_id']}: {text}", rc)


def execute(state: NodeState, args: Sequence[str], forced: FailureKind | None) -> Result:
    opts, mig = parse_args(args)
    try:
        gpus = select(state, opts.get("-i"))
    except LookupError:
        return Result("No devices were found", RC_NOT_FOUND)
    if not gpus:
        return Result("No devices were found", RC_NOT_FOUND)
    if forced is not None:
        return injected(gpus, opts, mig, forced)
    if mig is not None:
        return run_mig(state, gpus, mig)
    if "--query-gpu" in opts:
        return query_gpu(gpus, opts["--query-gpu"], opts.get("--format", "csv"))
    if "--query-compute-apps" in opts:
        return query_apps(state, gpus, opts["--query-compute-apps"], opts.get("--format", "csv"))
    if "-L" in opts:
        return Result(render_list(gpus))
    if "-r" in opts:
        return reset(gpus)
    if "-mig" in opts and opts["-mig"] in ("0", "1"):
        return set_mode(gpus, opts["-mig"] == "1")
    raise Usage(USAGE)


Taken = tuple[float | None, HangMode, FailureKind | None]


def _take(state: NodeState, line: str) -> Taken:
    """Consume the hang or injected failure that matches this call, if any."""
    for hang in list(state["hang"]):
        if hang["match"] in line:
            if hang["skip"] > 0:
                hang["skip"] -= 1
                continue
            state["hang"].remove(hang)
            return hang["seconds"], hang.get("mode", "sleep"), None
    for inj in list(state["inject"]):
        if inj["match"] in line:
            if inj["times"] > 0:
                inj["times"] -= 1
                if inj["times"] == 0:
                    state["inject"].remove(inj)
            if inj["error"] == "timeout":
                return 3600.0, "sleep", None
            return None, "sleep", inj["error"]
    return None, "sleep", None


def hang(seconds: float, mode: HangMode) -> None:
    """Sleep `seconds`; in `child`/`detached` mode first fork a child that holds stdout and
    stderr open as long (a driver-side helper of a stuck call). A `detached` child has a session
    of its own: a kill of this call's process group does not reach it."""
    if mode != "sleep" and os.fork() == 0:  # pragma: no cover - the child
        try:
            if mode == "detached":
                os.setsid()
            time.sleep(seconds)
        finally:
            os._exit(0)
    time.sleep(seconds)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = os.environ.get(ENV_STATE)
    if not path or not os.path.exists(path):
        print(NO_DRIVER)
        return 9
    try:
        latency = SmiLatency.from_env()  # fakesmi_latency: the time a call stands for
    except ValueError as exc:
        print(f"fake nvidia-smi: {exc}", file=sys.stderr)
        return 2
    line = " ".join(args)
    with locked(path):
        state = load(path)
        sleep, mode, forced = _take(state, line)
        save(path, state)
    if sleep is not None:
        append_log(path, {"argv": args, "hang": sleep, "mode": mode, "pid": os.getpid()})
        sys.stdout.flush()
        hang(sleep, mode)
    with locked(path):
        state = load(path)
        try:
            res = execute(state, args, forced)
        except (Usage, ValueError):
            res = Result(USAGE, 2)
        save(path, state)
        append_log(path, {"argv": args, "rc": res.rc, "effects": res.effects})
    if latency is not None:
        time.sleep(latency.of(args))
    if res.out:
        sys.stdout.write(res.out.rstrip("\n") + "\n")
    return res.rc


if __name__ == "__main__":
    sys.exit(main())
