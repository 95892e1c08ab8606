"""One read of a cluster, as `doctor` and `plan` read it, and its file: what
`vgpu-operator doctor --save-snapshot FILE` writes and `vgpu-operator plan --snapshot FILE`
plans over without a cluster.

The file is JSON: one object with the format (`kind`, `formatVersion`), when the cluster was read
(`readAt`, to the microsecond: the offline plan's "now"), who wrote it (`writtenBy`), the
operator configuration the objects were read with (`config`, every field written out by its
chart name, `auto` already resolved), the VGPUNodePolicies as listed, and every list a
`ClusterSnapshot` holds as the reads left it. JSON and not YAML: the objects came from the
apiserver as JSON and go back to the same values (no YAML type guessing of strings such as
`1.10` or `yes`), and a snapshot of 5,000 nodes and 50,000 pods (23 MB) loads in under a
second, where PyYAML's C loader takes 25 s.

No Secret is read or written (the objects are the named ConfigMaps, the scheduler Deployment,
every DaemonSet, Node, running Pod and VGPUNodePolicy, the ResourceClaims' drivers, and with the
configuration's `dra` section what the DRA rules read: the resource.k8s.io versions served, the
DeviceClasses and the driver's ResourceSlices), nor anything of the kubeconfig: the file holds
what the reading credentials could see, as the API showed it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vgpu_operator import __version__, kubeapi
from vgpu_operator.commands import exitcodes
from vgpu_operator.core.dra.observed import DraApi
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import ConfigError, OperatorConfig
from vgpu_operator.models.config_errors import validation_issues

Obj = dict[str, Any]

KIND = "VGPUClusterSnapshot"
# A reader takes its own version and every older one; a change that an older reader would
# misread (a list renamed, a meaning changed) is a new version.
FORMAT_VERSION = 1
# The ClusterSnapshot's object lists, by their name in the file.
LISTS = {
    "configMaps": "configmaps",
    "deployments": "deployments",
    "daemonSets": "daemonsets",
    "nodes": "nodes",
    "pods": "pods",
}
SAVE_HINT = "save one with `vgpu-operator doctor --save-snapshot FILE`"


@dataclass(frozen=True)
class ClusterRead:
    """What one read of the cluster holds: the snapshot the rules and the plan see, the
    VGPUNodePolicies as listed, and when the reads completed."""

    snapshot: ClusterSnapshot
    policies: list[Obj] = field(default_factory=list)
    read_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    # what the person running the command should know of the read: a CRD missing, objects a
    # `--config` names that the snapshot did not read
    notes: tuple[str, ...] = ()


class SnapshotFileError(Exception):
    """A snapshot file that cannot be used: the message names the file and the fix; `code` is
    the exit code of commands/exitcodes.py's table."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# --- reading the cluster ---------------------------------------------------------------------


async def read_cluster(
    api: Any, config: OperatorConfig, *, missing_crd_is_empty: bool = False
) -> ClusterRead:
    """Everything `plan` reads (`controller.snapshot.read_snapshot` across the cluster, and
    every VGPUNodePolicy), in parallel. `missing_crd_is_empty`: a cluster without the
    VGPUNodePolicy CRD (404) has no policy, and the read says so in its notes; else the 404
    is raised as any refusal is."""
    from vgpu_operator.controller.snapshot import read_snapshot

    async def policies() -> tuple[list[Obj], tuple[str, ...]]:
        try:
            listing = await kubeapi.request(api, "GET", kubeapi.policy_path())
        except kubeapi.NotFound:
            if not missing_crd_is_empty:
                raise
            return [], ("the cluster has no VGPUNodePolicy CRD: the snapshot holds no policy",)
        items = listing.get("items") or []
        return [dict(p) for p in items if isinstance(p, Mapping)], ()

    snapshot, (live, notes) = await asyncio.gather(read_snapshot(api, config), policies())
    return ClusterRead(snapshot, live, datetime.now(UTC), notes)


# --- to and from the file --------------------------------------------------------------------


def _stamp(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def config_data(config: OperatorConfig) -> Obj:
    """The configuration as the chart's `config:` holds it (the keys `--config` reads), every
    field written out: a later version's defaults do not change what a snapshot was read with."""
    data: Obj = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


def to_data(read: ClusterRead) -> Obj:
    s = read.snapshot
    claims = None if s.claims is None else {k: sorted(v) for k, v in sorted(s.claims.items())}
    return {
        "kind": KIND,
        "formatVersion": FORMAT_VERSION,
        "readAt": _stamp(read.read_at),
        "writtenBy": f"vgpu-operator {__version__}",
        "config": config_data(s.config),
        "policies": read.policies,
        **{key: getattr(s, attr) for key, attr in LISTS.items()},
        # each ResourceClaim ("namespace/name") and the drivers of its allocated devices; null:
        # they could not be listed, and every claim counts as a GPU's
        "resourceClaimDrivers": claims,
        # what the DRA rules read (null: not read, without a `dra` section or when refused; an
        # older file has no key, read as null)
        "dra": None if s.dra_api is None else dra_data(s.dra_api),
    }


def dra_data(dra: DraApi) -> Obj:
    return {
        "served": list(dra.served),
        "deviceClasses": [dict(c) for c in dra.device_classes],
        "resourceSlices": [dict(s) for s in dra.resource_slices],
    }


def save(path: str, read: ClusterRead) -> None:
    """Write the snapshot to `path` whole or not at all (a temporary file beside it, renamed
    over it), readable by its owner only, as a kubeconfig is: it holds what the reading
    credentials could see. Raises OSError."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w", encoding="utf-8") as out:
            json.dump(to_data(read), out, indent=1, ensure_ascii=False)
            out.write("\n")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _not_a_snapshot(source: str, why: str) -> SnapshotFileError:
    return SnapshotFileError(
        f"{source} is not a cluster snapshot ({why}); {SAVE_HINT}", exitcodes.USAGE
    )


def _objects(data: Mapping[str, Any], key: str, source: str, within: str = "") -> list[Obj]:
    items = data.get(key)
    if not isinstance(items, list):
        raise _not_a_snapshot(source, f"`{within}{key}` is not a list")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("metadata", {}), dict):
            raise _not_a_snapshot(source, f"{within}{key}[{i}] is not a Kubernetes object")
    return items


def _claims(value: Any, source: str) -> dict[str, frozenset[str]] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(v, list) and all(isinstance(d, str) for d in v) for v in value.values()
    ):
        raise _not_a_snapshot(source, "`resourceClaimDrivers` is not a map of driver lists")
    return {str(k): frozenset(v) for k, v in value.items()}


def _dra(value: Any, source: str) -> DraApi | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _not_a_snapshot(source, "`dra` is not a mapping")
    served = value.get("served")
    if not isinstance(served, list) or not all(isinstance(v, str) for v in served):
        raise _not_a_snapshot(source, "`dra.served` is not a list of group versions")
    return DraApi(
        served=tuple(served),
        device_classes=tuple(_objects(value, "deviceClasses", source, "dra.")),
        resource_slices=tuple(_objects(value, "resourceSlices", source, "dra.")),
    )


def _config(value: Any, source: str) -> OperatorConfig:
    fix = "give the configuration with --config FILE, or save the snapshot again"
    if not isinstance(value, dict):
        raise _not_a_snapshot(source, "`config` is not a mapping")
    try:
        config = OperatorConfig.model_validate(value)
    except ValidationError as exc:
        problems = ConfigError(validation_issues(exc, OperatorConfig))
        raise SnapshotFileError(
            f"{source}: the operator configuration it was read with is not valid for this "
            f"version; {fix}:\n{problems}",
            exitcodes.USAGE,
        ) from None
    if config.auto_fields():
        raise SnapshotFileError(
            f"{source}: its operator configuration has names to resolve from the cluster "
            f"({', '.join(config.auto_fields())}); {fix}",
            exitcodes.USAGE,
        )
    return config


def _unread(config: OperatorConfig, saved: Any) -> tuple[str, ...]:
    """A note naming the objects `config` reads by name that the snapshot's own configuration
    did not (they were not read: the plan sees them absent)."""
    from vgpu_operator.controller.snapshot import watched_objects

    try:
        read_with = OperatorConfig.model_validate(saved)
    except ValidationError:
        return (
            "the snapshot's own configuration is not valid for this version: which objects "
            "it read is not known",
        )
    unread = [o for o in watched_objects(config) if o not in watched_objects(read_with)]
    if not unread:
        return ()
    named = ", ".join(f"{kind} {ns}/{name}" for kind, ns, name in unread)
    return (
        f"--config names objects the snapshot did not read ({named}): the plan sees them "
        "absent; save a snapshot with `vgpu-operator doctor --config FILE --save-snapshot "
        "FILE` to read them",
    )


def from_data(data: Any, source: str, config: OperatorConfig | None = None) -> ClusterRead:
    """The read a file's `data` holds. `config`: plan with this configuration instead of the
    one the snapshot was read with (that one then only tells which objects were read)."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        found = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise _not_a_snapshot(source, f"its kind is {found or 'not set'}, not {KIND}")
    version = data.get("formatVersion")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _not_a_snapshot(source, f"formatVersion {version!r} is not a version")
    if version > FORMAT_VERSION:
        raise SnapshotFileError(
            f"{source} is a snapshot of format version {version}, written by "
            f"{data.get('writtenBy') or 'a newer vgpu-operator'}; this vgpu-operator "
            f"({__version__}) reads format {FORMAT_VERSION} and older: plan with that version "
            "or newer, or save the snapshot again with this one",
            exitcodes.USAGE,
        )
    read_at = data.get("readAt")
    try:
        when = datetime.fromisoformat(str(read_at).replace("Z", "+00:00"))
    except ValueError:
        raise _not_a_snapshot(source, f"readAt {read_at!r} is not a time") from None
    notes: tuple[str, ...] = ()
    if config is None:
        config = _config(data.get("config"), source)
    else:
        notes = _unread(config, data.get("config"))
    # the object lists by field (typed loosely: ClusterSnapshot's other fields take other types)
    lists: dict[str, Any] = {attr: _objects(data, key, source) for key, attr in LISTS.items()}
    snapshot = ClusterSnapshot(
        config=config,
        claims=_claims(data.get("resourceClaimDrivers"), source),
        dra_api=_dra(data.get("dra"), source),
        **lists,
    )
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return ClusterRead(snapshot, _objects(data, "policies", source), when, notes)


def load(path: str, config: OperatorConfig | None = None) -> ClusterRead:
    """The read saved in `path` (see `from_data`). Raises SnapshotFileError: exit 3 when the
    file cannot be read, 2 when it is not a snapshot this version reads."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SnapshotFileError(
            f"cannot read snapshot {path}: no such file; {SAVE_HINT}", exitcodes.CANNOT
        ) from None
    except OSError as exc:
        raise SnapshotFileError(
            f"cannot read snapshot {path}: {exc.strerror or exc}", exitcodes.CANNOT
        ) from None
    except UnicodeDecodeError:
        raise _not_a_snapshot(path, "not UTF-8 text") from None
    try:
        # The standard library's parser, not yamlsafe's bounded one: yamlsafe's depth scan goes
        # character by character (4 s over a 23 MB snapshot, where json.loads takes 0.6 s), and
        # json.loads has no aliases to expand; nesting too deep and integers too long are
        # errors it raises, caught here.
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _not_a_snapshot(path, f"not JSON: {exc}") from None
    return from_data(data, path, config)
