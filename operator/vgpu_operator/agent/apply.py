"""The executor: observe, plan (core.mig.partition), run the steps GPU by GPU through nvidia-smi,
read back,
verify, and return a terminal Outcome: `success`, `failed` (with a reason) or `blocked` (with the
processes). Every path, errors and timeouts included, ends in one of the three.

- A mode change on one GPU resets only that GPU, and only when the mode stays pending on Ampere
  (nvidia-smi switches an idle GPU at once). If it is still pending after the reset, or the GPU
  cannot be reset (passthrough), the GPU fails with the reason `reboot required`
  (NVIDIA/mig-parted#9, NVIDIA/gpu-operator#603). Hopper and later are never reset for a mode
  change: a reset or reboot clears their MIG mode; a pending one means a client holds the GPU
  (`held by another client`).
- Two phases (core.mig.partition): GPUs whose driver listed no profiles while MIG was off get their
mode
  first; the profiles are then read again and their instances planned and applied.
- Before a reset and when the driver refuses a destroy as "in use", running compute processes are
  looked up again: the GPU is `blocked` with them, nothing is destroyed (the plan already blocks
  GPUs that had processes when it was made).
- An allocated but idle device has no process: before a GPU's steps destroy an instance, change
  its MIG mode or reset it, the `guard` (agent.kubelet, the kubelet's PodResources) is asked
  which pods hold it. Held: `blocked`, naming the pods; the kubelet cannot tell: `failed`
  (`kubelet allocations unreadable`); nothing is touched either way.
- Success is reported only from a read-back that matches (core.mig.verify), never from a write.
- A timeout stops the run: a hung nvidia-smi would only hang again. A call that cannot even be
  ended (agent.smi) marks its GPU unhealthy in the inventory, with the reason `GPU unhealthy`.

No Kubernetes here: the agent's loop (a thin shell) reads the released configuration, calls
`reconcile_gpus`, and writes the inventory annotation, the state label and Events from the Outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from vgpu_operator.agent.kubelet import PodResourcesGuard, Refused
from vgpu_operator.agent.observe import observe, processes_on, read_back
from vgpu_operator.agent.outcome import GpuOutcome, Outcome, Reason, State
from vgpu_operator.agent.parse import SmiErrorKind
from vgpu_operator.agent.smi import NvidiaSmi, SmiError
from vgpu_operator.core.mig.layout import UNCONFIRMED
from vgpu_operator.core.mig.partition import GpuPlan, LayoutError, Step, StepKind, plan_node
from vgpu_operator.core.mig.verify import verify, verify_gpu
from vgpu_operator.models.gpu_catalog import arch_for_name
from vgpu_operator.models.inventory import GpuInfo, Inventory, ProcessInfo
from vgpu_operator.models.node import NodeConfig

__all__ = ["GpuOutcome", "Outcome", "Reason", "observe", "reconcile_gpus"]


class _Stop(Exception):
    """One GPU ends here with this outcome."""

    def __init__(
        self, state: State, reason: Reason, message: str, procs: list[ProcessInfo] | None = None
    ):
        super().__init__(message)
        self.state, self.reason, self.message = state, reason, message
        self.procs = tuple(procs or ())


_KIND_REASON = {
    SmiErrorKind.TIMEOUT: Reason.TIMEOUT,
    SmiErrorKind.UNHEALTHY: Reason.UNHEALTHY,
    SmiErrorKind.INSUFFICIENT_RESOURCES: Reason.INSUFFICIENT,
    SmiErrorKind.IN_USE: Reason.IN_USE,
    SmiErrorKind.RESET_NOT_SUPPORTED: Reason.REBOOT_REQUIRED,
    SmiErrorKind.PENDING_REBOOT: Reason.REBOOT_REQUIRED,
    SmiErrorKind.NOT_MIG_CAPABLE: Reason.NOT_MIG_CAPABLE,
}


def _reason(e: SmiError) -> Reason:
    return _KIND_REASON.get(e.kind, Reason.SMI)


async def reconcile_gpus(
    driver: NvidiaSmi,
    desired: NodeConfig | None,
    previous: NodeConfig | None,
    *,
    on_step: Callable[[Step], None] | None = None,
    guard: PodResourcesGuard | None = None,
) -> Outcome:
    """Make the node's GPUs match `desired`; `previous` is the configuration last applied
    successfully (core.mig.partition: it decides whether a dynamic configuration is a switch).
    `guard`: asked before a GPU's destroying or resetting steps (None: processes only).

    Always returns a terminal Outcome; only cancellation propagates (it kills the running
    nvidia-smi first, agent.smi)."""
    try:
        return await _reconcile(driver, desired, previous, on_step, guard)
    except Exception as e:  # the contract is a terminal state on every path
        return Outcome("failed", Reason.INTERNAL, f"{type(e).__name__}: {e}")


async def _reconcile(
    driver: NvidiaSmi,
    desired: NodeConfig | None,
    previous: NodeConfig | None,
    on_step: Callable[[Step], None] | None,
    guard: PodResourcesGuard | None = None,
) -> Outcome:
    try:
        inv = await observe(driver)
    except SmiError as e:
        return Outcome("failed", _observe_reason(e), str(e))
    plan = plan_node(inv, desired, previous)
    if plan.errors:
        return _invalid(plan.errors, inv, previous)
    if desired is None:
        kept = inv.model_copy(update={"applied": previous})
        return Outcome("success", Reason.NO_CONFIG, "; ".join(plan.notes), inventory=kept)
    results: dict[int, GpuOutcome] = {}
    final = {g.index: g for g in inv.gpus}
    todo = {gp.index for gp in plan.gpus}
    for phase in (1, 2):
        for gp in plan.gpus:
            if gp.index not in todo:
                continue
            result, back = await _apply_gpu(driver, final[gp.index], gp, on_step, guard)
            if gp.index in results:  # the second phase of this GPU: count both phases' steps
                steps = results[gp.index].steps_done + result.steps_done
                result = replace(result, steps_done=steps)
            results[gp.index] = result
            if back is not None:
                final[gp.index] = back
            if result.reason in _STUCK:
                break
        # Phase 2: GPUs whose MIG mode went on before the driver listed their profiles.
        todo = {
            gp.index for gp in plan.gpus if gp.deferred and results[gp.index].state == "success"
        }
        if phase == 2 or not todo or any(r.reason in _STUCK for r in results.values()):
            break
        try:
            inv = await observe(driver)  # the profiles, read again now that MIG is on
        except SmiError as e:
            for i in todo:
                results[i] = GpuOutcome(i, "failed", _observe_reason(e), f"GPU {i}: {e}")
            break
        final.update({g.index: g for g in inv.gpus if g.index in todo})
        plan = plan_node(inv, desired, previous)
        if plan.errors:
            message = "; ".join(str(e) for e in plan.errors)
            for i in todo:
                results[i] = GpuOutcome(i, "failed", Reason.INVALID, message)
            break
    observed = inv.model_copy(update={"gpus": [final[i] for i in sorted(final)]})
    return _finish(observed, desired, previous, [results[i] for i in sorted(results)])


def _observe_reason(e: SmiError) -> Reason:
    return (
        _reason(e) if e.kind in (SmiErrorKind.TIMEOUT, SmiErrorKind.UNHEALTHY) else Reason.OBSERVE
    )


def _invalid(
    errors: tuple[LayoutError, ...], inv: Inventory, previous: NodeConfig | None
) -> Outcome:
    reason = Reason.UNCONFIRMED if all(e.kind == UNCONFIRMED for e in errors) else Reason.INVALID
    if all("not MIG-capable" in e.message for e in errors):
        reason = Reason.NOT_MIG_CAPABLE
    message = "; ".join(str(e) for e in errors)
    return Outcome(
        "failed", reason, message, inventory=inv.model_copy(update={"applied": previous})
    )


# A GPU that did not answer: nothing more is asked of nvidia-smi in this run.
_STUCK = frozenset({Reason.TIMEOUT, Reason.UNHEALTHY})


def _finish(
    final: Inventory, desired: NodeConfig, previous: NodeConfig | None, results: list[GpuOutcome]
) -> Outcome:
    """The node outcome from the GPU outcomes and what was read back."""
    steps = sum(r.steps_done for r in results)
    settled = {r.index for r in results if r.state != "success"}
    for d in verify(final, desired, previous, skip=settled):
        results = [
            replace(r, state="failed", reason=Reason.VERIFY, message=str(d))
            if r.index == d.gpu and r.state == "success"
            else r
            for r in results
        ]
    failed = [r for r in results if r.state == "failed"]
    blocked = [r for r in results if r.state == "blocked"]
    applied = desired if not failed and not blocked else previous
    # After a timeout the GPU that hung is in an unknown state: no inventory is reported. A call
    # that could not even be ended marks its GPU unhealthy in the inventory (the rest as read).
    timed_out = any(r.reason == Reason.TIMEOUT for r in results)
    stuck = {r.index: r.message for r in results if r.reason == Reason.UNHEALTHY}
    if stuck:
        gpus = [g.model_copy(update={"unhealthy": stuck.get(g.index)}) for g in final.gpus]
        final = final.model_copy(update={"gpus": gpus})
    inventory = None if timed_out else final.model_copy(update={"applied": applied})
    if failed:
        message = "; ".join(r.message for r in failed + blocked)
        return Outcome("failed", failed[0].reason, message, tuple(results), inventory, steps)
    if blocked:
        message = "; ".join(r.message for r in blocked)
        return Outcome("blocked", Reason.IN_USE, message, tuple(results), inventory, steps)
    reason = Reason.APPLIED if steps else Reason.UNCHANGED
    message = f"{steps} step(s) applied and verified" if steps else "the GPUs already match"
    return Outcome("success", reason, message, tuple(results), inventory, steps)


def _process_label(p: ProcessInfo) -> str:
    """`train.py (pid 42)`; a process whose name nvidia-smi could not resolve (`[Not Found]`: it
    runs in another PID namespace than the caller) as `compute process, host pid 42`."""
    if not p.name or p.name == "[Not Found]":
        return f"compute process, host pid {p.pid}"
    return f"{p.name} (pid {p.pid})"


def _blocked_message(index: int, procs: tuple[ProcessInfo, ...] | list[ProcessInfo]) -> str:
    names = ", ".join(_process_label(p) for p in procs)
    return f"GPU {index} has running compute processes: {names}; nothing was changed on it"


async def _apply_gpu(
    driver: NvidiaSmi,
    gpu: GpuInfo,
    gp: GpuPlan,
    on_step: Callable[[Step], None] | None,
    guard: PodResourcesGuard | None = None,
) -> tuple[GpuOutcome, GpuInfo | None]:
    """Run one GPU's steps, read the GPU back and verify it: (outcome, what was read back)."""
    i = gp.index
    if gp.error:
        return GpuOutcome(i, "failed", Reason.INVALID, gp.error), None
    if gp.blocked:
        message = _blocked_message(i, gp.blocked_by)
        return GpuOutcome(i, "blocked", Reason.IN_USE, message, 0, gp.blocked_by), None
    if not gp.steps:
        return GpuOutcome(i, "success", Reason.UNCHANGED), None
    done = 0
    try:
        if guard is not None:
            await guard.check(driver, gpu, gp.steps)
        for step in gp.steps:
            if on_step is not None:
                on_step(step)
            await _run_step(driver, gpu, step)
            done += 1
    except _Stop as s:
        outcome = GpuOutcome(i, s.state, s.reason, s.message, done, s.procs)
    except Refused as r:
        reason = Reason.IN_USE if r.blocked else Reason.KUBELET
        outcome = GpuOutcome(i, "blocked" if r.blocked else "failed", reason, r.message, done)
    except SmiError as e:
        outcome = GpuOutcome(i, "failed", _reason(e), f"GPU {i}: {e}", done)
    else:
        outcome = GpuOutcome(i, "success", Reason.APPLIED, f"GPU {i}: {done} step(s) applied", done)
    if outcome.reason in _STUCK:
        return outcome, None
    try:
        back = await read_back(driver, gpu)
    except SmiError as e:
        return GpuOutcome(i, "failed", _reason(e), f"GPU {i}: read-back failed: {e}", done), None
    # a deferred GPU's instances come in the second phase: here only its mode is checked
    target = replace(gp.target, profiles=None) if gp.deferred else gp.target
    differences = verify_gpu(target, back)
    if outcome.state == "success" and differences:
        message = "; ".join(map(str, differences))
        return GpuOutcome(i, "failed", Reason.VERIFY, message, done), back
    return outcome, back


async def _run_step(driver: NvidiaSmi, gpu: GpuInfo, step: Step) -> None:
    i = step.gpu
    try:
        match step.kind:
            case StepKind.DESTROY_CI:
                assert step.gi is not None
                await driver.destroy_ci(i, step.gi, step.ci)
            case StepKind.DESTROY_GI:
                assert step.gi is not None
                await driver.destroy_gi(i, step.gi)
            case StepKind.SET_MODE:
                await _set_mode(driver, gpu, bool(step.enable))
            case StepKind.RESET:
                await _reset(driver, gpu, want=not bool(gpu.mig_current))
            case StepKind.CREATE_GI:
                assert step.profile_id is not None
                created = await driver.create_gi(i, step.profile_id, step.start)
                if not created:
                    raise _Stop("failed", Reason.SMI, f"GPU {i}: nvidia-smi created no instance")
            case StepKind.CREATE_CI:
                assert step.gi is not None
                await driver.create_ci(i, step.gi, await _default_ci(driver, i, step.gi))
    except SmiError as e:
        if e.kind == SmiErrorKind.IN_USE:
            procs = await _processes(driver, gpu)
            if procs:
                raise _Stop("blocked", Reason.IN_USE, _blocked_message(i, procs), procs) from e
        raise


async def _default_ci(driver: NvidiaSmi, index: int, gi: int) -> int:
    """The compute-instance profile `-C` would create in GPU instance `gi`: the one `mig -lcip`
    marks `*` (not one derived from the slice count: Hopper's 1g.20gb takes 7, not 0)."""
    listed = [p for p in await driver.list_ci_profiles(index, gi) if p.gi == gi]
    for p in listed:
        if p.default:
            return p.id
    raise _Stop(
        "failed",
        Reason.SMI,
        f"GPU {index}: nvidia-smi lists no default compute-instance profile for GPU instance {gi}",
    )


async def _processes(driver: NvidiaSmi, gpu: GpuInfo) -> list[ProcessInfo]:
    return processes_on(gpu.bus_id, gpu.uuid, await driver.compute_apps())


async def _mode(driver: NvidiaSmi, index: int) -> tuple[bool | None, bool | None]:
    rows = await driver.query_gpus(index)
    if not rows:
        raise _Stop("failed", Reason.SMI, f"GPU {index} is no longer listed by nvidia-smi")
    return rows[0].mig_current, rows[0].mig_pending


async def _set_mode(driver: NvidiaSmi, gpu: GpuInfo, enable: bool) -> None:
    i, word = gpu.index, "enable" if enable else "disable"
    await driver.set_mig_mode(i, enable)
    current, pending = await _mode(driver, i)
    if current == enable and pending == enable:
        return
    if pending != enable:
        raise _Stop(
            "failed", Reason.SMI, f"GPU {i}: nvidia-smi did not accept MIG mode {int(enable)}"
        )
    if arch_for_name(gpu.name) != "ampere":
        # Hopper and later switch without a reset unless a client holds the GPU, and a reset (or
        # a reboot) would clear MIG mode instead of applying it: nothing to reset here.
        procs = await _processes(driver, gpu)
        if procs:
            raise _Stop("blocked", Reason.IN_USE, _blocked_message(i, procs), procs)
        raise _Stop(
            "failed",
            Reason.HELD,
            f"GPU {i}: MIG mode is pending {word}: another client holds the GPU "
            f"(nvidia-persistenced, DCGM, a monitoring agent?). A reset or a reboot clears MIG "
            f"mode on this GPU ({gpu.name}) rather than applying it, so the agent does not reset "
            f"it: stop the client; the agent retries (and turns MIG on again after any reset "
            f"or reboot)",
        )
    await _reset(driver, gpu, enable)


async def _reset(driver: NvidiaSmi, gpu: GpuInfo, want: bool) -> None:
    """Reset only this GPU so its pending MIG mode becomes current; read the mode back."""
    i, word = gpu.index, "enable" if want else "disable"
    procs = await _processes(driver, gpu)
    if procs:
        raise _Stop("blocked", Reason.IN_USE, _blocked_message(i, procs), procs)
    try:
        await driver.reset(i)
    except SmiError as e:
        if e.kind in (SmiErrorKind.RESET_NOT_SUPPORTED, SmiErrorKind.PENDING_REBOOT):
            raise _Stop(
                "failed",
                Reason.REBOOT_REQUIRED,
                f"GPU {i}: MIG mode is pending {word} and the GPU cannot be reset here "
                f"(reset not supported, e.g. GPU passthrough); {_after_reboot(gpu, want)}",
            ) from e
        if e.kind == SmiErrorKind.IN_USE:
            raise _Stop(
                "failed",
                Reason.RESET_REFUSED,
                f"GPU {i}: reset refused, in use by another client (nvidia-persistenced, DCGM, "
                f"a monitoring agent, or the nvidia_drm module?); stop it, or "
                f"{_after_reboot(gpu, want)}",
            ) from e
        raise
    current, _ = await _mode(driver, i)
    if current != want:
        raise _Stop(
            "failed",
            Reason.REBOOT_REQUIRED,
            f"GPU {i}: MIG mode is still pending {word} after the reset; "
            f"{_after_reboot(gpu, want)}",
        )


def _after_reboot(gpu: GpuInfo, want: bool) -> str:
    """What a reboot does for a pending MIG mode: Ampere keeps the pending mode and applies it
    at boot; Hopper and later come up with MIG off (the agent turns it on again)."""
    if arch_for_name(gpu.name) == "ampere" or not want:
        return f"reboot the node to apply MIG mode {'enable' if want else 'disable'}"
    return (
        f"a reboot turns MIG mode off on this GPU ({gpu.name}); the agent turns it on "
        f"again when the node is back"
    )
