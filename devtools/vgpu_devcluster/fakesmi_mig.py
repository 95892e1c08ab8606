"""The `nvidia-smi mig ...` half of the fake: list, create and destroy instances.

Behaviour as in the MIG user guide
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html), and the
conservative choices where it is silent:
- creating without a placement uses a "least damage" first fit: the start that leaves the most legal
  placements of all profiles open, lowest start on a tie. This reproduces every documented outcome:
  `-cgi 19,19,14,9` fails with Insufficient Resources on A100-40GB while `9,19,14,19` succeeds
  ("Example 2: Creation of a 3-2-1-1 geometry"), `-cgi 9,3g.20gb -C` yields GPU instance IDs 2 then
  1, seven 1g get IDs 13,11,12,7,8,9,10 (the guide's listings). GI IDs follow
  models.gpu_catalog.gi_heap_id.
- an explicit placement (`-cgi 9:4`) is honoured or fails with Insufficient Resources.
- a GPU instance with compute instances, and any instance a process runs on, is "In use by another
  client" (MIG user guide); a process without a `gi` counts as using every instance of its GPU.
- listing or creating on a GPU whose MIG mode is off prints `No MIG-enabled devices found.`
  (exit 6); nothing to destroy prints the `Not Found` line of the listings (exit 6). UNCONFIRMED
  wording, chosen to fail loudly.
"""

from __future__ import annotations

from vgpu_devcluster.fakesmi_render import (
    ci_name,
    ci_profiles,
    driver_major,
    gi_name,
    model_of,
    profiles,
    render_lci,
    render_lcip,
    render_lgi,
    render_lgip,
    render_lgipp,
    used_slices,
)
from vgpu_devcluster.fakesmi_state import CiState, GiState, GpuState, NodeState
from vgpu_operator.models.gpu_catalog import MigProfile, gi_heap_id

RC_NOT_FOUND = 6
RC_INSUFFICIENT = 23  # harvester/harvester#11636: "nvidia-smi exit code 23"
RC_OTHER = 255
IN_USE = "In use by another client"
NO_MIG_ENABLED = "No MIG-enabled devices found."


class Result:
    """What one call prints, its exit code, and its effects for the call log."""

    def __init__(self, out: str = "", rc: int = 0) -> None:
        self.out, self.rc = out, rc
        self.effects: dict[str, list[list[int]]] = {}

    def effect(self, kind: str, *item: int) -> None:
        self.effects.setdefault(kind, []).append(list(item))


class MigArgs:
    """The `mig` subcommand's action and options."""

    def __init__(self, action: str = "") -> None:
        self.action = action  # lgip, lgipp, lgi, lci, lcip, cgi, cci, dci, dgi
        self.cgi: list[str] = []
        self.cci: list[str] | None = None  # CI profile IDs or names
        self.gi: list[int] | None = None
        self.ci: list[int] | None = None
        self.default_ci = False


def run_mig(state: NodeState, gpus: list[GpuState], a: MigArgs) -> Result:
    if a.action in ("lgip", "lgipp"):
        capable = [g for g in gpus if model_of(g).mig_capable]
        if not capable:
            return Result("No MIG-supported devices found.", RC_NOT_FOUND)
        # drivers up to 535 cannot list profiles while MIG is off
        # (NVIDIA/mig-parted@v0.15.0:pkg/mig/discovery/discovery.go `ErrNoProfilesDiscovered`)
        shown = [g for g in capable if g["mig_current"] or driver_major(state) > 535]
        if not shown:
            return Result(NO_MIG_ENABLED, RC_NOT_FOUND)
        render = render_lgip if a.action == "lgip" else render_lgipp
        return Result(render(state, shown))
    enabled = [g for g in gpus if g["mig_current"]]
    if not enabled:
        return Result(NO_MIG_ENABLED, RC_NOT_FOUND)
    if a.action == "lgi":
        if not any(g["gis"] for g in enabled):
            return Result("No GPU instances found: Not Found", RC_NOT_FOUND)
        return Result(render_lgi(state, enabled))
    if a.action == "lci":
        wanted = set(a.gi) if a.gi is not None else None
        if not any(gi["cis"] for g in enabled for gi in g["gis"] if _hit(gi, wanted)):
            return Result("No compute instances found: Not Found", RC_NOT_FOUND)
        return Result(render_lci(enabled, wanted))
    if a.action == "lcip":
        wanted = set(a.gi) if a.gi is not None else None
        if not any(_hit(gi, wanted) for g in enabled for gi in g["gis"]):
            return Result("No GPU instances found: Not Found", RC_NOT_FOUND)
        return Result(render_lcip(enabled, wanted))
    res = Result()
    for gpu in enabled:
        {"cgi": _create_gis, "cci": _create_cis, "dci": _destroy_cis, "dgi": _destroy_gis}[
            a.action
        ](state, gpu, a, res)
        if res.rc:
            break
    res.out = "\n".join(line for line in res.out.split("\n") if line)
    return res


def _hit(gi: GiState, wanted: set[int] | None) -> bool:
    return wanted is None or gi["id"] in wanted


def _add(res: Result, line: str) -> None:
    res.out += line + "\n"


def _resolve(gpu: GpuState, token: str) -> MigProfile | None:
    key = token.removeprefix("MIG ")
    return model_of(gpu).profile(int(key) if key.isdigit() else key)


def choose_start(
    state: NodeState, gpu: GpuState, p: MigProfile, explicit: int | None
) -> int | None:
    """Where the driver puts a new instance of `p`; None: Insufficient Resources."""
    mem, compute = used_slices(gpu)
    existing = sum(1 for gi in gpu["gis"] if gi["profile_id"] == p.id)
    if compute + p.slices > model_of(gpu).compute_slices or existing >= p.max_count:
        return None
    free = [s for s in p.placements if not set(range(s, s + p.size)) & mem]
    if explicit is not None:
        free = [s for s in free if s == explicit]
    if not free:
        return None
    everything = profiles(state, gpu)

    def left_open(start: int) -> int:
        taken = mem | set(range(start, start + p.size))
        return sum(
            1 for q in everything for t in q.placements if not set(range(t, t + q.size)) & taken
        )

    return max(free, key=lambda s: (left_open(s), -s))


def _new_ci(
    state: NodeState, gpu: GpuState, ci_id: int, profile_id: int, start: int, size: int
) -> CiState:
    import uuid  # only here: importing it costs more than most calls of the fake

    state["serial"] += 1
    mig_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"{gpu['uuid']}/mig/{state['serial']}")
    return CiState(id=ci_id, profile_id=profile_id, start=start, size=size, uuid=f"MIG-{mig_uuid}")


def _fail(res: Result, what: str, plural: str, error: str, rc: int) -> None:
    _add(res, f"Unable to create {what}: {error}")
    _add(res, f"Failed to create {plural}: {error}")
    res.rc = rc


def _create_gis(state: NodeState, gpu: GpuState, a: MigArgs, res: Result) -> None:
    g = gpu["index"]
    for token in a.cgi:
        name, _, at = token.partition(":")
        p = _resolve(gpu, name)
        what = f"a GPU instance on GPU {g:2d} using profile {name}"
        if p is None or (at and not at.isdigit()):
            return _fail(res, what, "GPU instances", "Invalid Argument", RC_OTHER)
        start = choose_start(state, gpu, p, int(at) if at else None)
        if start is None:
            return _fail(res, what, "GPU instances", "Insufficient Resources", RC_INSUFFICIENT)
        gi_id = gi_heap_id(model_of(gpu).memory_slices, p.size, start)
        gi = GiState(id=gi_id, profile_id=p.id, start=start, size=p.size, cis=[])
        gpu["gis"].append(gi)
        res.effect("created_gi", g, gi_id)
        using = f"using profile MIG {p.name}"
        _add(
            res,
            f"Successfully created GPU instance ID {gi_id:2d} on GPU {g:2d} {using} (ID {p.id:2d})",
        )
        if a.default_ci:
            gi["cis"].append(_new_ci(state, gpu, 0, p.ci_profile_id, 0, p.slices))
            where = f"on GPU {g:2d} GPU instance ID {gi_id:2d}"
            _add(
                res,
                f"Successfully created compute instance ID  0 {where} {using} "
                f"(ID {p.ci_profile_id:2d})",
            )
    return None


def _create_cis(state: NodeState, gpu: GpuState, a: MigArgs, res: Result) -> None:
    g = gpu["index"]
    if a.gi is None:
        _add(res, "A GPU instance must be given with -gi to create compute instances.")
        res.rc = 2
        return None
    for gi in gpu["gis"]:
        p = model_of(gpu).profile(gi["profile_id"])
        if gi["id"] not in a.gi or p is None:
            continue
        where = f"on GPU {g:2d} GPU instance ID {gi['id']:2d}"
        offered = ci_profiles(gpu, gi)
        for token in a.cci or [str(p.ci_profile_id)]:
            key = token.removeprefix("MIG ")
            match = [o for o in offered if str(o[0]) == key or o[1] == key]
            if not match:  # a profile this GPU instance does not list (`mig -lcip`)
                what = f"a compute instance {where} using profile {token}"
                return _fail(res, what, "compute instances", "Invalid Argument", RC_OTHER)
            cp, _, size, _ = match[0]
            used = sum(c["size"] for c in gi["cis"])
            if size > p.slices - used:
                what = f"a compute instance {where} using profile {cp}"
                return _fail(
                    res, what, "compute instances", "Insufficient Resources", RC_INSUFFICIENT
                )
            ids = {c["id"] for c in gi["cis"]}
            ci = _new_ci(state, gpu, min(set(range(8)) - ids), cp, used, size)
            gi["cis"].append(ci)
            using = f"using profile MIG {ci_name(gpu, gi, ci)}"
            _add(res, f"Successfully created compute instance {where} {using} (ID {cp:2d})")
    return None


def _busy(gpu: GpuState, gi: GiState) -> bool:
    return any(p.get("gi", gi["id"]) == gi["id"] for p in gpu["processes"])


def _destroy_cis(state: NodeState, gpu: GpuState, a: MigArgs, res: Result) -> None:
    g = gpu["index"]
    wanted_gi = set(a.gi) if a.gi is not None else None
    wanted_ci = set(a.ci) if a.ci is not None else None
    hit = failed = False
    for gi in gi_list(gpu):
        if not _hit(gi, wanted_gi):
            continue
        for ci in list(gi["cis"]):
            if wanted_ci is not None and ci["id"] not in wanted_ci:
                continue
            hit = True
            what = (
                f"compute instance ID {ci['id']:2d} from GPU {g:2d} GPU instance ID {gi['id']:2d}"
            )
            if _busy(gpu, gi):
                _add(res, f"Unable to destroy {what}: {IN_USE}")
                failed = True
                continue
            gi["cis"].remove(ci)
            res.effect("destroyed_ci", g, gi["id"], ci["id"])
            _add(res, f"Successfully destroyed {what}")
    if failed:
        _add(res, f"Failed to destroy compute instances: {IN_USE}")
        res.rc = RC_OTHER
    elif not hit:
        _add(res, "No compute instances found: Not Found")
        res.rc = RC_NOT_FOUND


def _destroy_gis(state: NodeState, gpu: GpuState, a: MigArgs, res: Result) -> None:
    g = gpu["index"]
    wanted = set(a.gi) if a.gi is not None else None
    hit = failed = False
    for gi in gi_list(gpu):
        if not _hit(gi, wanted):
            continue
        hit = True
        if gi["cis"] or _busy(gpu, gi):
            _add(res, f"Unable to destroy GPU instance ID {gi['id']:2d} from GPU {g:2d}: {IN_USE}")
            failed = True
            continue
        gpu["gis"].remove(gi)
        res.effect("destroyed_gi", g, gi["id"])
        _add(res, f"Successfully destroyed GPU instance ID {gi['id']:2d} from GPU {g:2d}")
    if failed:
        _add(res, f"Failed to destroy GPU instances: {IN_USE}")
        res.rc = RC_OTHER
    elif not hit:
        _add(res, "No GPU instances found: Not Found")
        res.rc = RC_NOT_FOUND


def gi_list(gpu: GpuState) -> list[GiState]:
    return sorted(gpu["gis"], key=lambda x: x["id"])


__all__ = ["MigArgs", "Result", "choose_start", "gi_name", "run_mig"]
