"""Version facts of the Volcano scheduler and the HAMi device plugin, one function each, so the
rules read as the code does. Read from the releases' code: Project-HAMi/volcano-vgpu-device-plugin
v1.9.0 to v1.12.0 (cmd/vgpu/main.go, pkg/util/types.go, pkg/rm/rm.go; the handshake removed in
main by commit 9a6973b) and volcano-sh/volcano v1.12.0 to v1.15.1
(pkg/scheduler/api/devices/nvidia/vgpu/device_info.go; the handshake check replaced in PR #5388).
`None` (version unknown from the image tag) is never guessed into a fact: the callers decide what an
unknown version means for them."""

from __future__ import annotations

from typing import Literal

from vgpu_operator.models.volcano_views import Version

V1_10 = Version(1, 10, 0)
V1_12 = Version(1, 12, 0)
PLUGIN_LAST_HANDSHAKE = Version(1, 12, 0)
PLUGIN_LAST_NAME_FLAGS = Version(1, 11, 99)
PLUGIN_FIRST_MEMORY_FACTOR = Version(1, 9, 4)


def plugin_writes_handshake(v: Version) -> bool:
    """Plugins up to v1.12.0 write `volcano.sh/node-vgpu-handshake`; main removed it."""
    return v <= PLUGIN_LAST_HANDSHAKE


def plugin_writes_mode(v: Version) -> bool:
    """Register records have the 6th (mode) field from plugin v1.10.0."""
    return v >= V1_10


def plugin_takes_name_flags(v: Version) -> bool:
    """Up to v1.11 the kubelet resource names come from --resource-name & co only."""
    return v <= PLUGIN_LAST_NAME_FLAGS


def plugin_flags_always_override(v: Version) -> bool:
    """Up to v1.11 --device-split-count & co override the ConfigMap even when not given."""
    return v <= PLUGIN_LAST_NAME_FLAGS


def plugin_takes_memory_factor_flag(v: Version) -> bool:
    """`--gpu-memory-factor` exists from plugin v1.9.4 (absent in v1.9.0;
    Project-HAMi/volcano-vgpu-device-plugin@v1.9.4:cmd/vgpu/main.go)."""
    return v >= PLUGIN_FIRST_MEMORY_FACTOR


def plugin_reads_node_overrides(v: Version) -> bool:
    """Up to v1.11 per-node `devicesplitcount`, `devicecorescaling` and `filterdevices` of
    config.json only change a struct nothing reads: registration uses the global flag values,
    registers 100 cores per GPU and every GPU
    (Project-HAMi/volcano-vgpu-device-plugin@v1.11.0:pkg/plugin/vgpu/register.go,
    pkg/plugin/vgpu/plugin.go `apiDevices`, pkg/plugin/vgpu/util/util.go `readFromConfigFile`).
    From v1.12.0 they apply (pkg/util/util.go, pkg/rm/device_map.go)."""
    return v > PLUGIN_LAST_NAME_FLAGS


def plugin_prefixes_names(v: Version) -> bool:
    """From v1.12 names come from the ConfigMap and non-`volcano.sh/` ones get the prefix."""
    return v >= V1_12


def scheduler_requires_handshake(v: Version) -> bool:
    """Volcano ≤ v1.14.2 and v1.15.0 ignore nodes without a fresh handshake annotation;
    v1.14.3+, v1.15.1+ and later replaced it by the allocatable check."""
    if v < Version(1, 14, 3):
        return True
    return Version(1, 15, 0) <= v < Version(1, 15, 1)


def scheduler_requires_default_names(v: Version) -> bool:
    """Volcano v1.14.3+/v1.15.1+ only sees nodes whose allocatable has the hard-coded
    `volcano.sh/vgpu-number/-cores/-memory`, whatever the ConfigMap says."""
    return not scheduler_requires_handshake(v)


def scheduler_rejects_five_fields(v: Version) -> bool:
    """Volcano v1.12.0+ rejects register records without the mode field."""
    return v >= V1_12


# The last Volcano whose `predicates` plugin reads `predicate.DynamicResourceAllocationEnable`
# (default false: kube-scheduler's DRA plugin off) from its arguments
# (volcano-sh/volcano@v1.14.4:pkg/scheduler/plugins/predicates/predicates.go, as from v1.13.0).
# From v1.15.0 the argument is no longer read and DRA follows the DynamicResourceAllocation feature
# gate, on since Kubernetes 1.34 (volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/predicates/
# predicates.go).
SCHEDULER_LAST_DRA_ARGUMENT = Version(1, 14, 99)


def scheduler_reads_dra_argument(v: Version) -> bool:
    """Volcano <= v1.14.x schedules ResourceClaims only with
    `predicate.DynamicResourceAllocationEnable: true` on its predicates plugin."""
    return v <= SCHEDULER_LAST_DRA_ARGUMENT


def scheduler_parses_string_bools(v: Version) -> bool:
    """From Volcano v1.15.0 `Arguments.GetBool` parses a string switch with `strconv.ParseBool`
    (a quoted "true" is true); up to v1.14.4 only a YAML boolean counts
    (volcano-sh/volcano@v1.15.0:pkg/scheduler/framework/arguments.go)."""
    return v >= Version(1, 15, 0)


# How a scheduler version reads the top-level `vnpus:` of the device config:
# "ignored": no such field (yaml.v2 skips unknown keys): volcano-sh/volcano@v1.13.0 to v1.13.3 and
#   v1.14.0-alpha.0 (pkg/scheduler/api/devices/config/config.go: `Config` has `nvidia` only);
# "list": `VNPUs []VNPUConfig`: volcano-sh/volcano@v1.14.0-alpha.1 to v1.14.3, v1.15.0-alpha.0 and
#   v1.15.0 (same file); the wrapper mapping fails `yaml.Unmarshal` of the whole file and
#   `InitDevicesConfig` keeps `GetDefaultDevicesConfig()` for the life of the process (`once.Do`),
#   logged at V(3) only;
# "both": `VNPUs VNPUsConfig` whose `UnmarshalYAML` takes the wrapper or the list:
#   volcano-sh/volcano@v1.14.4, v1.15.1, v1.16.0-alpha.0 and v1.16.0-alpha.1
#   (pkg/scheduler/api/devices/config/vnpu.go);
# "unknown": the version is not known (no tag to read it from).
# `Version` drops a pre-release suffix: v1.14.0-alpha.0 (ignores `vnpus:`) reads as v1.14.0 and is
# treated as "list", which only makes the operator write the form it would ignore anyway.
VnpusForm = Literal["ignored", "list", "both", "unknown"]


def scheduler_vnpus_form(v: Version | None) -> VnpusForm:
    """The `vnpus:` form a scheduler version parses (see above). Not in version order: v1.14.4
    reads both forms, v1.15.0 (newer) only the list."""
    if v is None:
        return "unknown"
    if v < Version(1, 14, 0):
        return "ignored"
    if v < Version(1, 14, 4) or Version(1, 15, 0) <= v < Version(1, 15, 1):
        return "list"
    return "both"


# --- the pod annotations that narrow a vGPU pod's GPUs (core.volcano.pod_filters) ---
# `nvidia.com/use-gputype` / `nouse-gputype` are read by every Volcano with the vGPU device code
# (`checkGPUtype`, volcano-sh/volcano@v1.10.0 to v1.16.0-alpha.1:
# pkg/scheduler/api/devices/nvidia/vgpu/utils.go); up to v1.11 a `nouse-gputype` of one value (no
# comma) excludes nothing (its match returns true), fixed in v1.12.0. `volcano.sh/vgpu-use-gpuuuid`
# / `vgpu-nouse-gpuuuid` are read from v1.16.0-alpha.0 (`gpuUUIDFilter`, same file; absent at
# v1.15.1); `Version` drops the pre-release suffix, so both alphas read as v1.16.0.
SCHEDULER_FIRST_GPU_UUID_FILTER = Version(1, 16, 0)


def scheduler_single_nouse_type_excludes(v: Version | None) -> bool:
    """A `nvidia.com/nouse-gputype` without a comma excludes the types it matches (v1.12.0 and
    later; taken as so when the version is unknown, as every release the operator reads does)."""
    return v is None or v >= V1_12


def scheduler_reads_gpu_uuid_filter(v: Version | None) -> bool:
    """`volcano.sh/vgpu-use-gpuuuid` and `vgpu-nouse-gpuuuid` are read (v1.16.0-alpha.0 and
    later); an unknown version is not taken to read them."""
    return v is not None and v >= SCHEDULER_FIRST_GPU_UUID_FILTER
