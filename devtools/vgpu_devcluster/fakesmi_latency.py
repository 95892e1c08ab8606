"""How long a call of the fake nvidia-smi takes, by kind of call (for benchmarks).

The fake answers at once unless `FAKE_NVIDIA_SMI_LATENCY` is set in its environment: then each
call sleeps, after it has acted and before it prints, the seconds given for its kind, as
`query=0.05,mode=5,create=0.5,destroy=0.3` (kinds left out take 0). The sleep holds no lock and
uses no CPU, so the fake's own CPU (a Python process per call, counted by its parent as the CPU
of its children) stays apart from the time it stands for.

Kinds:
- `query`: every read (`--query-gpu`, `--query-compute-apps`, `-L`, `mig -lgip/-lgipp/-lgi/-lci/
  -lcip`);
- `mode`: `-mig 0|1` (on Ampere with the GPU reset the driver does itself) and `-r`;
- `create`: `mig -cgi` (with `-C`, its compute instance) and `mig -cci`;
- `destroy`: `mig -dci` and `mig -dgi`.

`REALISTIC` is the benchmarks' default: orders of magnitude, not measurements. No public source
gives per-call times of MIG operations (the transcripts the fake is tested against show output
only); the one public timing of a query is `time nvidia-smi` at 0.017 s with persistence mode on
(NVIDIA/nvidia-docker#379). The others are assumptions, stated as such in docs/benchmarks.md: a
mode change that resets the GPU takes seconds, creating or destroying an instance a fraction of
a second.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

ENV_LATENCY = "FAKE_NVIDIA_SMI_LATENCY"

_QUERY_MIG = {"-lgip", "-lgipp", "-lgi", "-lci", "-lcip"}
_QUERY_MIG |= {
    "--list-gpu-instance-profiles",
    "--list-gpu-instance-possible-placements",
    "--list-gpu-instances",
    "--list-compute-instances",
    "--list-compute-instance-profiles",
}
_CREATE = {"-cgi", "-cci", "--create-gpu-instance", "--create-compute-instance"}
_DESTROY = {"-dci", "-dgi", "--destroy-compute-instance", "--destroy-gpu-instance"}
_MODE = {"-mig", "--multi-instance-gpu", "-r", "--gpu-reset"}


@dataclass(frozen=True)
class SmiLatency:
    """Seconds one call of each kind takes (see the module docstring for the kinds)."""

    query: float = 0.0
    mode: float = 0.0
    create: float = 0.0
    destroy: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"SmiLatency.{f.name}: {getattr(self, f.name)} is negative")

    def text(self) -> str:
        """The value of FAKE_NVIDIA_SMI_LATENCY (and of the benchmarks' --smi-latency)."""
        return ",".join(f"{f.name}={getattr(self, f.name):g}" for f in fields(self))

    def env(self) -> dict[str, str]:
        return {ENV_LATENCY: self.text()}

    @classmethod
    def parse(cls, text: str) -> SmiLatency:
        """`kind=seconds,...`; an unknown kind or a value that is no number says which."""
        known = {f.name for f in fields(cls)}
        values: dict[str, float] = {}
        for item in filter(None, (x.strip() for x in text.split(","))):
            kind, sep, value = item.partition("=")
            kind = kind.strip()
            if not sep or kind not in known:
                raise ValueError(
                    f"smi latency {item!r}: write kind=seconds with kind one of "
                    f"{', '.join(sorted(known))}"
                )
            try:
                values[kind] = float(value)
            except ValueError:
                raise ValueError(f"smi latency {item!r}: {value!r} is not a number") from None
        return cls(**values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SmiLatency | None:
        text = (os.environ if environ is None else environ).get(ENV_LATENCY)
        return cls.parse(text) if text else None

    def of(self, args: Sequence[str]) -> float:
        """The seconds for this call (its argument list)."""
        return float(getattr(self, kind_of(args)))


def kind_of(args: Sequence[str]) -> str:
    """`query`, `mode`, `create` or `destroy` for a call's arguments."""
    tokens = {a.partition("=")[0] for a in args}
    if tokens & _CREATE:
        return "create"
    if tokens & _DESTROY:
        return "destroy"
    if tokens & _QUERY_MIG:
        return "query"
    if tokens & _MODE:
        return "mode"
    return "query"


REALISTIC = SmiLatency(query=0.05, mode=5.0, create=0.5, destroy=0.3)
