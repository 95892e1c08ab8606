"""The nvidia-smi driver: every call a subprocess with a timeout, outputs parsed (agent.parse),
errors classified (parse.SmiErrorKind). Every mutating call is scoped to one GPU (`-i N`).

The binary is `nvidia-smi` on PATH unless `VGPU_NVIDIA_SMI` or the `binary` argument names
another (the tests point it at the fake, devcluster.fakesmi, which is run exactly the same way).

Placement syntax: `-cgi <profile>:<start>` is nvidia-smi's "profile tuple ... optional placement
specifier, which consists of a colon and a placement start index" (`nvidia-smi mig -h`, as quoted in
public wrappers; the MIG user guide does not show it). The placement is a request; the agent reads
back what the driver did.

Every call ends within a bound, the kill included. Each runs in a process group of its own; after
its timeout the whole group is killed (a helper it started dies with it) and the agent waits at
most `kill_grace` seconds more for the process to end and its output pipes to close, never
without a bound. A call that is still not over then (stuck in the driver, e.g. after an Xid 79;
or a descendant outside the group still holding the pipe) is abandoned: it raises
`SmiErrorKind.UNHEALTHY`, and until it is over every further call fails at once with the same
kind instead of starting another nvidia-smi that would hang too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass

from vgpu_operator.agent import metrics
from vgpu_operator.agent.parse import (
    COMPUTE_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    CiProfileRow,
    CiRow,
    GiRow,
    GpuRow,
    PlacementRow,
    ProcessListError,
    ProcRow,
    ProfileRow,
    SmiErrorKind,
    classify,
    parse_compute_apps,
    parse_gpus,
    parse_lci,
    parse_lcip,
    parse_lgi,
    parse_lgip,
    parse_lgipp,
)
from vgpu_operator.agent.parse_actions import (
    CreatedGi,
    Destroyed,
    ListedGpu,
    ModeChange,
    ResetResult,
    parse_created,
    parse_destroyed,
    parse_list,
    parse_mode_change,
    parse_reset,
)

ENV_BINARY = "VGPU_NVIDIA_SMI"
DEFAULT_BINARY = "nvidia-smi"
DEFAULT_TIMEOUT = 60.0
KILL_GRACE = 5.0  # seconds a killed call gets to end, its output pipes included


@dataclass(frozen=True)
class SmiResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return (self.stdout + "\n" + self.stderr).strip()


class SmiError(Exception):
    """An nvidia-smi call that failed, timed out or could not run."""

    def __init__(self, kind: SmiErrorKind, argv: tuple[str, ...], rc: int | None, output: str):
        self.kind = kind
        self.argv = argv
        self.rc = rc
        self.output = output.strip()
        last = self.output.splitlines()[-1] if self.output else f"exit code {rc}"
        super().__init__(f"`{' '.join(argv)}` failed ({kind}): {last}")


class NvidiaSmi:
    """Async nvidia-smi runner. Not thread-safe; one agent drives one node."""

    def __init__(
        self,
        binary: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        env: Mapping[str, str] | None = None,
        kill_grace: float = KILL_GRACE,
    ) -> None:
        self.binary = binary or os.environ.get(ENV_BINARY) or DEFAULT_BINARY
        self.timeout = timeout
        self.kill_grace = kill_grace
        self.env = {**os.environ, **env} if env is not None else None
        self.calls = 0
        # calls that could not be ended: (what was run, its output being read to the end)
        self._stuck: list[tuple[str, asyncio.Future[tuple[bytes, bytes]]]] = []

    @property
    def stuck(self) -> list[str]:
        """The calls still running after their kill (empty once they are over)."""
        self._stuck = [(what, io) for what, io in self._stuck if not _over(io)]
        return [what for what, _ in self._stuck]

    async def run(self, *args: str, timeout: float | None = None, check: bool = True) -> SmiResult:
        """One call; counted and timed in `agent.metrics` by its outcome."""
        start, started = time.monotonic(), self.calls
        try:
            result = await self._run(*args, timeout=timeout, check=check)
        except SmiError as exc:
            outcome = "error" if exc.rc is not None else _OUTCOMES.get(exc.kind, "error")
            if self.calls == started:
                outcome = "not_run"  # refused while an earlier call is stuck
            ran = outcome != "not_run"
            metrics.smi_call(outcome, time.monotonic() - start if ran else None)
            raise
        metrics.smi_call("ok" if result.rc == 0 else "error", time.monotonic() - start)
        return result

    async def _run(self, *args: str, timeout: float | None, check: bool) -> SmiResult:
        argv = (self.binary, *args)
        if stuck := self.stuck:
            raise SmiError(
                SmiErrorKind.UNHEALTHY,
                argv,
                None,
                f"not run: an earlier call could not be ended and still runs ({stuck[0]}); the "
                "GPU or its driver is stuck (check dmesg for Xid errors; a reboot ends it)",
            )
        self.calls += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,  # its own process group: the kill reaches its children
            )
        except OSError as e:
            raise SmiError(SmiErrorKind.OTHER, argv, None, f"cannot run {self.binary}: {e}") from e
        io = asyncio.ensure_future(proc.communicate())
        limit = timeout or self.timeout
        try:
            done, _ = await asyncio.wait({io}, timeout=limit)
        except asyncio.CancelledError:
            await self._end(proc, io, argv)
            raise
        if not done:
            if not await self._end(proc, io, argv):
                raise SmiError(
                    SmiErrorKind.UNHEALTHY,
                    argv,
                    None,
                    f"no answer in {limit:g}s, and not over {self.kill_grace:g}s after it was "
                    f"killed (pid {proc.pid}): stuck in the driver",
                )
            raise SmiError(SmiErrorKind.TIMEOUT, argv, None, f"no answer in {limit:g}s")
        out, err = io.result()
        result = SmiResult(
            argv, proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")
        )
        if check and result.rc != 0:
            raise SmiError(classify(result.output), argv, result.rc, result.output)
        return result

    async def _end(
        self,
        proc: asyncio.subprocess.Process,
        io: asyncio.Future[tuple[bytes, bytes]],
        argv: tuple[str, ...],
    ) -> bool:
        """Kill the call's process group; wait at most `kill_grace` for the process to end and
        its pipes to close. False (and the call is remembered as stuck) when it did not."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        done, _ = await asyncio.wait({io}, timeout=self.kill_grace)
        if done:
            _over(io)
            return True
        self._stuck.append((f"`{' '.join(argv)}`, pid {proc.pid}", io))
        return False

    # --- queries ------------------------------------------------------------------------------

    async def query_gpus(self, index: int | None = None) -> list[GpuRow]:
        args = [f"--query-gpu={','.join(QUERY_GPU_FIELDS)}", "--format=csv,noheader,nounits"]
        return parse_gpus((await self.run(*args, *_scope(index))).stdout)

    async def list_profiles(self, index: int | None = None) -> list[ProfileRow]:
        """`mig -lgip`; [] when the GPU is not MIG-capable or the driver lists none."""
        res = await self._listing("mig", *_scope(index), "-lgip")
        return parse_lgip(res.stdout) if res else []

    async def list_placements(self, index: int | None = None) -> list[PlacementRow]:
        res = await self._listing("mig", *_scope(index), "-lgipp")
        return parse_lgipp(res.stdout) if res else []

    async def list_gis(self, index: int) -> list[GiRow]:
        """`mig -i N -lgi`; [] for `No GPU instances found: Not Found`."""
        res = await self._listing("mig", "-i", str(index), "-lgi")
        return parse_lgi(res.stdout) if res else []

    async def list_cis(self, index: int) -> list[CiRow]:
        res = await self._listing("mig", "-i", str(index), "-lci")
        return parse_lci(res.stdout) if res else []

    async def list_ci_profiles(self, index: int, gi: int) -> list[CiProfileRow]:
        """`mig -i N -gi G -lcip`: the compute-instance profiles of one GPU instance."""
        res = await self._listing("mig", "-i", str(index), "-gi", str(gi), "-lcip")
        return parse_lcip(res.stdout) if res else []

    async def compute_apps(self) -> list[ProcRow]:
        fields = ",".join(COMPUTE_APPS_FIELDS)
        res = await self.run(f"--query-compute-apps={fields}", "--format=csv,noheader,nounits")
        try:
            return parse_compute_apps(res.stdout)
        except ProcessListError as e:  # unreadable is not empty: the caller changes nothing
            raise SmiError(SmiErrorKind.OTHER, res.argv, res.rc, f"{res.output}\n{e}") from e

    async def list_devices(self) -> list[ListedGpu]:
        """`-L`: the GPUs and their MIG devices with their UUIDs (what device plugins register;
        agent.allocations maps the kubelet's device IDs through it)."""
        return parse_list((await self.run("-L")).stdout)

    async def _listing(self, *args: str) -> SmiResult | None:
        """A listing call; None when nvidia-smi says there is nothing to list."""
        res = await self.run(*args, check=False)
        if res.rc == 0:
            return res
        kind = classify(res.output)
        if kind in (SmiErrorKind.NOT_FOUND, SmiErrorKind.NOT_MIG_CAPABLE):
            return None
        raise SmiError(kind, res.argv, res.rc, res.output)

    # --- actions, each on one GPU -------------------------------------------------------------

    async def set_mig_mode(self, index: int, enable: bool) -> list[ModeChange]:
        """`-i N -mig 1|0`. A pending result is not an error here: the caller reads back."""
        res = await self.run("-i", str(index), "-mig", "1" if enable else "0")
        return parse_mode_change(res.output)

    async def reset(self, index: int) -> list[ResetResult]:
        """`-i N -r`: reset this GPU only (mig-parted resets every GPU of the node,
        NVIDIA/mig-parted@v0.15.0:cmd/nvidia-mig-parted/util/device.go `nvmlResetAllGPUs`)."""
        res = await self.run("-i", str(index), "-r", check=False)
        results = parse_reset(res.output)
        if res.rc != 0 or any(not r.ok for r in results):
            kind = classify(res.output)
            raise SmiError(
                SmiErrorKind.OTHER if kind == SmiErrorKind.NOT_FOUND else kind,
                res.argv,
                res.rc,
                res.output,
            )
        return results

    async def create_gi(self, index: int, profile_id: int, start: int | None) -> list[CreatedGi]:
        """`mig -i N -cgi <id>[:<start>] -C`: one GPU instance with its default CI."""
        spec = str(profile_id) if start is None else f"{profile_id}:{start}"
        res = await self.run("mig", "-i", str(index), "-cgi", spec, "-C")
        return parse_created(res.output)[0]

    async def create_ci(self, index: int, gi: int, ci_profile_id: int) -> None:
        await self.run("mig", "-i", str(index), "-gi", str(gi), "-cci", str(ci_profile_id))

    async def destroy_ci(self, index: int, gi: int, ci: int | None = None) -> list[Destroyed]:
        extra = ("-ci", str(ci)) if ci is not None else ()
        res = await self.run("mig", "-i", str(index), "-gi", str(gi), *extra, "-dci")
        return parse_destroyed(res.output)

    async def destroy_gi(self, index: int, gi: int) -> list[Destroyed]:
        res = await self.run("mig", "-i", str(index), "-gi", str(gi), "-dgi")
        return parse_destroyed(res.output)


# Calls that raised without an exit code, by kind: the metrics' outcome label (OTHER: the
# binary could not be started).
_OUTCOMES = {
    SmiErrorKind.TIMEOUT: "timeout",
    SmiErrorKind.UNHEALTHY: "stuck",
    SmiErrorKind.OTHER: "not_run",
}


def _scope(index: int | None) -> tuple[str, ...]:
    return () if index is None else ("-i", str(index))


def _over(io: asyncio.Future[tuple[bytes, bytes]]) -> bool:
    """Whether a call's output reading is over (its exception, if any, is consumed)."""
    if not io.done():
        return False
    if not io.cancelled():
        io.exception()
    return True
