"""The `vnpus:` section of the scheduler's device config in the form its version parses.

`hami-scheduler-device` (the Ascend plugin's ConfigMap) holds the wrapper
`{hamiVnpuCore, configs}`, which the Ascend plugin needs from v1.3.0 on; the scheduler reads its own
copy from the device config, and the versions differ in what they parse
(`component_versions.scheduler_vnpus_form`): a list-only version
(volcano-sh/volcano@v1.15.0:pkg/scheduler/api/devices/config/config.go) fails to parse the whole
file on the wrapper and runs on built-in defaults for the life of the process. The list form is
what every version that reads `vnpus:` parses (volcano-sh/volcano@v1.15.1:
pkg/scheduler/api/devices/config/vnpu.go falls back to it, with `HamiVnpuCore` false), so it is also
what is written when the version is not known, unless the wrapper's `hamiVnpuCore: true` would be
lost (volcano-sh/volcano@v1.16.0-alpha.0:pkg/scheduler/api/devices/ascend/hami/device_info.go reads
it). Pure functions over plain YAML values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_operator.core.volcano.component_versions import VnpusForm
from vgpu_operator.core.volcano.render.common import plain


def _core_and_configs(value: Any) -> tuple[bool, Any]:
    """(hamiVnpuCore, configs) of either form, as vnpu.go's `UnmarshalYAML` reads them."""
    if isinstance(value, Mapping):
        return value.get("hamiVnpuCore") is True, plain(value.get("configs"))
    return False, plain(value)


def vnpus_for_scheduler(source: Any, form: VnpusForm) -> Any:
    """What the operator writes as the scheduler's `vnpus:` for the Ascend plugin's `source`."""
    if not isinstance(source, Mapping) or form in ("both", "ignored"):
        return plain(source)
    core, configs = _core_and_configs(source)
    if form == "unknown" and core:
        return plain(source)  # the list would drop hamiVnpuCore: true; rule vnpus-form reports it
    return configs if configs is not None else []


def scheduler_parses(value: Any, form: VnpusForm) -> bool:
    """Whether a scheduler of this form reads `value` (None: no section) without failing the whole
    device config; "unknown": whether every version does."""
    if value is None or form == "ignored":
        return True
    if form == "both":
        return isinstance(value, (list, Mapping))
    return isinstance(value, list)


def scheduler_reads(value: Any, form: VnpusForm) -> Any:
    """What the scheduler takes from `value`: a list-only version the chips alone (it has no
    hamiVnpuCore), the others the switch and the chips."""
    core, configs = _core_and_configs(value)
    return configs if form == "list" else (core, configs)


def keeps(live: Any, desired: Any, form: VnpusForm) -> bool:
    """Whether the live `vnpus:` may stay: the scheduler parses it and reads from it what it would
    read from `desired` (a correct list form is never rewritten as the wrapper)."""
    if plain(live) == plain(desired):
        return True
    return (
        live is not None
        and scheduler_parses(live, form)
        and scheduler_reads(live, form) == scheduler_reads(desired, form)
    )
