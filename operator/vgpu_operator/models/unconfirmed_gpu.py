"""The shape of a row of models.gpu_catalog_unconfirmed: what public sources show of a GPU whose
MIG geometry no cited listing confirms in full, each figure with its source, and the sources the
rows share."""

from __future__ import annotations

from typing import Final, NamedTuple

MIG_PARTED_CONFIG: Final = "NVIDIA/mig-parted@v0.15.0:deployments/systemd/config-default.yaml"
# HAMi's own scheduler chart names some of these models in its migProfileAllowlist (its model
# strings match as substrings too).
HAMI_CHART: Final = (
    "Project-HAMi/HAMi@v2.10.0:charts/hami/templates/scheduler/device-configmap.yaml"
)
MIG_GUIDE_TABLES: Final = (
    "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"
)


class ListedProfile(NamedTuple):
    """One row of a real `nvidia-smi mig -lgip` listing, as printed there."""

    name: str
    id: int  # the nvidia-smi profile ID
    total: int  # the "Total" of "Free/Total"
    memory_gib: float  # the "Memory GiB" column
    sm: int
    source: str


class KnownProfile(NamedTuple):
    """A GPU-instance profile a cited source names for the model; `max_count` None: no source
    gives the most instances of it."""

    name: str
    max_count: int | None


class UnconfirmedGpu(NamedTuple):
    key: str  # short model name
    nvml_name: str  # the name NVML reports, "" when no source names it at all
    name_seen: str  # the capture that shows `nvml_name` exactly; "" : the name is not confirmed
    pci_device_ids: tuple[str, ...]  # mig-parted's device-filter form, 0xDDDDVVVV
    pci_source: str
    profiles: tuple[KnownProfile, ...]
    profiles_source: str
    listed: tuple[ListedProfile, ...]
    unconfirmed: str  # why this is not a models.gpu_catalog row

    def lowest_gib(self, profile: str) -> float | None:
        """The lowest `-lgip` figure any cited listing shows for `profile` (None: none shows it)."""
        return min((r.memory_gib for r in self.listed if r.name == profile), default=None)

    @property
    def unlisted(self) -> tuple[str, ...]:
        """The profiles no cited listing shows a memory figure for."""
        seen = {r.name for r in self.listed}
        return tuple(p.name for p in self.profiles if p.name not in seen)


def listing_rows(source: str, *rows: tuple[str, int, int, float, int]) -> tuple[ListedProfile, ...]:
    return tuple(ListedProfile(n, i, t, g, sm, source) for n, i, t, g, sm in rows)
